"""Optuna storage URLs for ``umpipe-bench tune``, checked before a study is opened.

A URL SQLAlchemy cannot parse, a database kind it does not know, a driver that is not
installed, or an SQLite file whose folder does not exist is a :class:`StorageError` (one line,
exit code 2; docs/ARCHITECTURE.md, "Errors") instead of a traceback from deep inside
SQLAlchemy, and nothing is created on the way (no folder, no half-made study).

Several ``tune`` processes may open one new database at once: :func:`storage_lock` holds an
``flock`` on ``<file>.lock`` (SQLite) or a session advisory lock (PostgreSQL,
``pg_advisory_lock``) while Optuna creates its tables and the study, so they never race on
``CREATE TABLE`` / ``CREATE TYPE``: PostgreSQL does not serialize those itself (two workers on
a fresh database failed with a unique violation on ``pg_type``; tests/test_tune_workers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from ..filelock import sidecar_lock

__all__ = ["StorageError", "check_storage", "sqlite_path", "storage_lock"]


#: a ``--storage`` URL that cannot be used; the message says why and what to do
StorageError = InputError


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for other databases and ``:memory:``)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def check_storage(url: str) -> None:
    """Fail now, naming the reason, if Optuna could not open ``url``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    where = f"--storage {url!r}"
    try:
        u = make_url(url)
    except ArgumentError:
        raise StorageError(f"{where}: not a database URL; expected e.g. "
                           "sqlite:///results/tuning.db or postgresql://user@host/db") from None
    try:
        dialect = u.get_dialect()
    except ArgumentError:
        raise StorageError(f"{where}: SQLAlchemy knows no database kind "
                           f"{u.drivername!r} (sqlite, postgresql, mysql, ...)") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = getattr(exc, "name", None) or u.get_driver_name()
        raise StorageError(f"{where}: the {u.get_backend_name()} driver {module!r} is not "
                           f"installed (pip install {module})") from None
    path = sqlite_path(url)
    if path is not None and not path.absolute().parent.is_dir():
        raise StorageError(f"{where}: folder {str(path.parent)!r} does not exist; create it "
                           "or choose another file")


#: The PostgreSQL advisory lock key :func:`storage_lock` takes (any fixed 64-bit number).
PG_LOCK_KEY = 0x756D70697065  # "umpipe"


@contextmanager
def _pg_lock(url: str) -> Iterator[None]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
    finally:
        engine.dispose()


@contextmanager
def storage_lock(url: str) -> Iterator[None]:
    """Serialize opening a storage among processes (SQLite: a file lock; PostgreSQL: an
    advisory lock); a no-op for other databases."""
    from sqlalchemy.engine import make_url

    if make_url(url).get_backend_name() == "postgresql":
        with _pg_lock(url):
            yield
        return
    path = sqlite_path(url)
    if path is None:
        yield
        return
    with sidecar_lock(path):
        yield

"""Optuna storage URLs for ``umpipe-bench tune``, checked before a study is opened.

A URL SQLAlchemy cannot parse, a database kind it does not know, a driver that is not
installed, an SQLite file whose folder does not exist or that is not an SQLite database, and a
server that cannot be reached or refuses the login are each a :class:`StorageError` (one line
naming the URL, its password hidden, and the reason; exit code 2; docs/ARCHITECTURE.md,
"Errors") instead of a traceback from deep inside SQLAlchemy, and nothing is created on the way
(no folder, no lock file, no half-made study). A server that does not answer fails after
:data:`CONNECT_TIMEOUT_S` seconds (the drivers' own default is to wait as long as TCP does).

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

__all__ = ["CONNECT_TIMEOUT_S", "StorageError", "check_storage", "connect_args",
           "describe_failure", "sqlite_path", "storage_label", "storage_lock"]

#: Seconds a connection to a database server may take before the storage is refused.
CONNECT_TIMEOUT_S = 10

#: The connect argument that bounds the connection time, per driver (SQLAlchemy's names).
_TIMEOUT_ARGS = {"psycopg2": "connect_timeout", "psycopg": "connect_timeout",
                 "psycopg2cffi": "connect_timeout", "pymysql": "connect_timeout",
                 "mysqldb": "connect_timeout", "pg8000": "timeout"}

#: The first bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


#: a ``--storage`` URL that cannot be used; the message says why and what to do
StorageError = InputError


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for other databases and ``:memory:``)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def storage_label(url: str) -> str:
    """The storage URL without its password (safe to print and save)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


def connect_args(url: str) -> dict[str, int]:
    """The driver's connect arguments that bound a connection to :data:`CONNECT_TIMEOUT_S`
    (none for SQLite and for drivers without such an argument)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return {}
    name = _TIMEOUT_ARGS.get(u.get_driver_name())
    return {} if name is None else {name: CONNECT_TIMEOUT_S}


def describe_failure(url: str, exc: BaseException) -> StorageError:
    """A database error met while opening ``url`` as one line: the driver's own first line."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    reason = lines[0] if lines else type(orig).__name__
    return StorageError(f"--storage {storage_label(url)!r}: cannot open the study's database: "
                        f"{reason}")


def _check_sqlite_file(url: str, where: str) -> None:
    path = sqlite_path(url)
    if path is None:
        return
    if not path.absolute().parent.is_dir():
        raise StorageError(f"{where}: folder {str(path.parent)!r} does not exist; create it "
                           "or choose another file")
    if not path.exists():
        return
    if not path.is_file():
        raise StorageError(f"{where}: {str(path)!r} is not a regular file; expected an SQLite "
                           "database file (or a new name)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StorageError(f"{where}: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if head and head != _SQLITE_MAGIC:
        raise StorageError(f"{where}: {str(path)!r} is not an SQLite database; choose another "
                           "file")
    if head:
        tables = _sqlite_tables(path, where)
        if tables and "studies" not in tables:  # Optuna would add its tables to someone's data
            raise StorageError(f"{where}: {str(path)!r} is an SQLite database of something "
                               f"else (tables {', '.join(sorted(tables)[:5])}), not an Optuna "
                               "storage; choose another file")


def _sqlite_tables(path: Path, where: str) -> set[str]:
    """The tables of an SQLite file, read without writing to it."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise StorageError(f"{where}: cannot read {str(path)!r} as an SQLite database: "
                           f"{exc}") from None
    return {r[0] for r in rows}


def check_storage(url: str) -> None:
    """Fail now, naming the reason, if Optuna could not open ``url`` (what can be known without
    connecting; :func:`describe_failure` words what a connection then meets)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    where = f"--storage {storage_label(url)!r}"
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
    _check_sqlite_file(url, where)


#: The PostgreSQL advisory lock key :func:`storage_lock` takes (any fixed 64-bit number).
PG_LOCK_KEY = 0x756D70697065  # "umpipe"


@contextmanager
def _pg_lock(url: str) -> Iterator[None]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args(url))
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

"""Declarative checks of the data users hand in: problem, plan, matrix and best-known files
and the mappings the Python API accepts.

A spec says what a value must be (:class:`Int`, :class:`Num`, :class:`Str`, :class:`Bool`,
:class:`List`, :class:`Map`, :class:`Obj` of :class:`Field` s); :func:`check` walks a decoded
document against it and raises the caller's error class on the *first* thing that is wrong,
as one line naming the file, the dotted field path (``stages[2].memory.param_bytes``), what
was expected and what was found. An object refuses keys its spec does not list and suggests
the closest known one, so a misspelt optional key (``bwd_fra``) fails instead of being
silently ignored. :func:`read_text`, :func:`load_json` and :func:`load_toml` read files as
UTF-8 and turn a decoding or syntax error into one line with the byte offset or the line and
column. Range and relation checks that need several fields at once (sizes covering ``1..B``,
partitions summing to ``B``) stay with the objects that own them.

Seeds are non-negative integers below ``2**32`` (:data:`SEED_RANGE`, the range numpy's and
Optuna's generators take, and that of the seeds in simulation-network names), refused
otherwise wherever they enter (:func:`check_seed`).

This module imports no torch and nothing else of this package but its errors.
"""

from __future__ import annotations

import difflib
import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UmpipeError, UserInputError

__all__ = [
    "SEED_HELP",
    "SEED_RANGE",
    "Any_",
    "Bool",
    "Field",
    "Int",
    "List",
    "Map",
    "Mismatch",
    "Num",
    "Obj",
    "Spec",
    "Str",
    "check",
    "check_seed",
    "describe",
    "load_json",
    "load_toml",
    "parse_seed",
    "read_text",
]

#: Inclusive range of a seed (module docstring).
SEED_RANGE = (0, 2**32 - 1)


def describe(value: Any) -> str:
    """A short description of a found value for an error message: its JSON type, and the
    value itself when it is short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"string {text!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    return type(value).__name__


#: The first problem a spec finds: ``(dotted field path, what was expected and found)``.
Mismatch = tuple[str, str]


class Spec:
    """What a value must be; subclasses implement :meth:`_check`, which returns the first
    :data:`Mismatch` or None."""

    #: None is accepted as "not given" (the field's default)
    nullable: bool = False

    def expected(self) -> str:
        raise NotImplementedError

    def _check(self, value: Any, path: str) -> Mismatch | None:
        raise NotImplementedError

    def validate(self, value: Any, path: str) -> Mismatch | None:
        if value is None and self.nullable:
            return None
        return self._check(value, path)

    def _fail(self, value: Any, path: str) -> Mismatch:
        return path, f"expected {self.expected()}, got {describe(value)}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo:g}"
    if hi is not None:
        return f" <= {hi:g}"
    return ""


@dataclass(frozen=True)
class Int(Spec):
    """An integer (never a boolean, never a float such as ``16.0``) in ``[lo, hi]``."""

    lo: int | None = None
    hi: int | None = None
    nullable: bool = False
    what: str = "an integer"

    def expected(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"{self.what} in {self.lo}..{self.hi}"
        return self.what + _range_text(self.lo, self.hi)

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return self._fail(value, path)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return self._fail(value, path)
        return None


@dataclass(frozen=True)
class Num(Spec):
    """A finite number (integer or float, not a boolean) in ``[lo, hi]`` (``(lo, hi]`` with
    ``lo_open``); ``finite=False`` also lets infinities through (never NaN)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    nullable: bool = False
    what: str = "a finite number"
    finite: bool = True

    def expected(self) -> str:
        return self.what + _range_text(self.lo, self.hi, self.lo_open)

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return self._fail(value, path)
        if self.finite and not math.isfinite(value):
            return self._fail(value, path)
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return self._fail(value, path)
        if self.hi is not None and value > self.hi:
            return self._fail(value, path)
        return None


@dataclass(frozen=True)
class Str(Spec):
    """A string; ``choices``: one of them (compared case-insensitively with ``fold``);
    ``parse``: a function that raises ``ValueError`` with the reason when the text is wrong."""

    choices: tuple[str, ...] | None = None
    nonempty: bool = False
    fold: bool = False
    parse: Callable[[str], Any] | None = None
    nullable: bool = False

    def expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return "a non-empty string" if self.nonempty else "a string"

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if not isinstance(value, str) or (self.nonempty and not value):
            return self._fail(value, path)
        if self.choices is not None:
            key = value.lower() if self.fold else value
            names = [c.lower() for c in self.choices] if self.fold else list(self.choices)
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return path, f"expected {self.expected()}, got {describe(value)}{hint}"
        if self.parse is not None:
            try:
                self.parse(value)
            except ValueError as exc:
                return path, str(exc)
        return None


@dataclass(frozen=True)
class Bool(Spec):
    nullable: bool = False

    def expected(self) -> str:
        return "true or false"

    def _check(self, value: Any, path: str) -> Mismatch | None:
        return None if isinstance(value, bool) else self._fail(value, path)


@dataclass(frozen=True)
class Any_(Spec):
    """Anything (JSON already limits what can come)."""

    def expected(self) -> str:
        return "any value"

    def _check(self, value: Any, path: str) -> Mismatch | None:
        return None


@dataclass(frozen=True)
class List(Spec):
    """A list of ``item`` values, ``min_len..max_len`` long; ``unique``: no value twice."""

    item: Spec = Any_()
    min_len: int = 0
    max_len: int | None = None
    unique: bool = False
    nullable: bool = False

    def expected(self) -> str:
        n = ""
        if self.max_len is not None:
            n = f" of {self.min_len} to {self.max_len}"
        elif self.min_len:
            n = f" of at least {self.min_len}"
        return f"a list{n} ({self.item.expected()} each)"

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if not isinstance(value, (list, tuple)):
            return self._fail(value, path)
        if len(value) < self.min_len or (self.max_len is not None and len(value) > self.max_len):
            return self._fail(value, path)
        seen: dict[str, int] = {}
        for i, v in enumerate(value):
            bad = self.item.validate(v, f"{path}[{i}]")
            if bad is not None:
                return bad
            if self.unique:
                key = json.dumps(v, sort_keys=True, default=str)
                if key in seen:
                    return (f"{path}[{i}]", f"{v!r} is listed twice (also at [{seen[key]}]); "
                            "expected each value once")
                seen[key] = i
        return None


@dataclass(frozen=True)
class Map(Spec):
    """A free-form object with string keys (``extra``, ``provenance``, planner settings),
    each value ``values``."""

    values: Spec = Any_()
    nullable: bool = False

    def expected(self) -> str:
        return "an object (a mapping of names to values)"

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if not isinstance(value, Mapping):
            return self._fail(value, path)
        for k, v in value.items():
            if not isinstance(k, str):
                return path, f"expected string keys, got {describe(k)}"
            bad = self.values.validate(v, _join(path, k))
            if bad is not None:
                return bad
        return None


@dataclass(frozen=True)
class Field:
    """One key of an :class:`Obj`: its name, its spec and whether it must be given."""

    name: str
    spec: Spec
    required: bool = False


@dataclass(frozen=True)
class Obj(Spec):
    """An object with known keys; unknown keys are refused (with the closest known key)
    unless ``open``, which lets any other key through unchecked (free-form metadata)."""

    fields: tuple[Field, ...] = ()
    open: bool = False
    nullable: bool = False
    what: str = "an object"

    def expected(self) -> str:
        return self.what

    def _check(self, value: Any, path: str) -> Mismatch | None:
        if not isinstance(value, Mapping):
            return self._fail(value, path)
        known = {f.name: f for f in self.fields}
        for f in self.fields:
            if f.required and f.name not in value:
                return _join(path, f.name), f"missing; expected {f.spec.expected()}"
        for k, v in value.items():
            f = known.get(k)
            if f is None:
                if self.open:
                    continue
                close = difflib.get_close_matches(str(k), list(known), n=3)
                hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close
                        else f"known fields: {', '.join(known)}")
                return _join(path, str(k)), f"unknown field; {hint}"
            bad = f.spec.validate(v, _join(path, k))
            if bad is not None:
                return bad
        return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check(data: Any, spec: Spec, where: str, error: type[UmpipeError] = UmpipeError,
          path: str = "") -> None:
    """Raise ``error`` with one line, ``WHERE: field PATH: what was expected, what was found``,
    on the first part of ``data`` that ``spec`` does not accept."""
    bad = spec.validate(data, path)
    if bad is not None:
        at = f"field {bad[0]!r}: " if bad[0] else ""
        raise error(f"{where}: {at}{bad[1]}")


def check_seed(value: Any, what: str, error: type[UmpipeError] = UmpipeError,
               allow_none: bool = False) -> int | None:
    """``value`` as a seed (module docstring), or ``error`` naming ``what``. ``allow_none``:
    None is a seed too (the API's "fresh entropy"), never on the command line or in files."""
    if value is None and allow_none:
        return None
    lo, hi = SEED_RANGE
    ok = (not isinstance(value, bool) and isinstance(value, int)) or (
        type(value).__module__ == "numpy" and hasattr(value, "dtype")
        and value.dtype.kind in "iu")
    if not ok or not lo <= int(value) <= hi:
        raise error(f"{what}: a seed must be an integer in {lo}..{hi}, got {describe(value)}")
    return int(value)


#: What ``--help`` says of a seed option.
SEED_HELP = f"an integer in {SEED_RANGE[0]}..{SEED_RANGE[1]}"


def parse_seed(text: str | int, option: str) -> int:
    """A seed given on the command line (``--seed 3``; an option's integer default passes
    through), or :class:`UserInputError` naming the option. Options take seeds as text and are
    parsed here, so that ``--seed -1`` and ``--seed 1.5`` are refused alike, in one line."""
    if isinstance(text, int):
        return int(check_seed(text, option, UserInputError))  # type: ignore[arg-type]
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise UserInputError(f"{option} {text!r}: a seed must be {SEED_HELP}") from None
    check_seed(value, f"{option} {text!r}", UserInputError)
    return value


# ----------------------------------------------------------------------------- files
def read_text(path: str | Path, where: str, error: type[UmpipeError] = UmpipeError) -> str:
    """A file's text as UTF-8; one line naming the file on a read or decoding error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start:exc.start + 1]
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(f"{where}: not UTF-8 text: byte 0x{bad.hex()} at offset {exc.start} "
                    f"(line {line}) cannot be decoded ({exc.reason})") from None


def load_json(path: str | Path, where: str, error: type[UmpipeError] = UmpipeError) -> Any:
    """Decode a JSON file (UTF-8). Syntax errors name the line and column; a key given twice
    in one object is refused (JSON would keep the last one silently)."""
    text = read_text(path, where, error)

    def pairs(items: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise error(f"{where}: key {k!r} appears twice in one object; expected each "
                            "key once")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno}, column "
                    f"{exc.colno}") from None


def load_toml(path: str | Path, where: str, error: type[UmpipeError] = UmpipeError
              ) -> dict[str, Any]:
    """Decode a TOML file (UTF-8); syntax errors name the line and column."""
    text = read_text(path, where, error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where}: not valid TOML: {exc}") from None

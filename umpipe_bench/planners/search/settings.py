"""Planner settings: one typed table per planner, validation and string coercion.

A planner declares its settings as a :class:`SettingsTable` of :class:`Setting` rows (name,
type, default, allowed range or choices, one-line effect); the table is also a mapping
``name -> default``. What a user passes (``--set key=value`` or keyword arguments) is checked
against it when the planner is built: an unknown name is an error that lists the valid ones,
strings are converted to the setting's type (so ``--set population=64`` and ``population=64``
agree), and a value outside the range is one :class:`PlannerError` line naming the planner,
the setting and what it accepts. docs/SETTINGS.md is generated from the tables
(:mod:`.settings_doc`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import PlannerError

__all__ = ["Setting", "SettingsTable", "auto_or", "coerce", "resolve_settings"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def coerce(planner: str, key: str, value: Any, default: Any) -> Any:
    """Convert ``value`` to the type of ``default`` (strings parsed; None default: as given)."""
    if default is None or value is None:
        return value
    kind = type(default)
    try:
        if kind is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError(value)
            return bool(value)
        if kind is int:
            f = float(value)
            if f != int(f):
                raise ValueError(value)
            return int(f)
        return kind(value)
    except (TypeError, ValueError, OverflowError):  # "1e400" is inf
        raise PlannerError(
            f"planner {planner!r}: setting {key}={value!r} is not a valid {kind.__name__}"
        ) from None


def resolve_settings(
    planner: str, defaults: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (validated, coerced; range-checked when ``defaults``
    is a :class:`SettingsTable`)."""
    if isinstance(defaults, SettingsTable):
        return defaults.resolve(planner, given)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(sorted(defaults)) or "(none)"
        raise PlannerError(
            f"planner {planner!r}: unknown setting(s) {', '.join(unknown)}; valid: {valid}"
        )
    out = dict(defaults)
    for k, v in given.items():
        out[k] = coerce(planner, k, v, defaults[k])
    return out


def auto_or(planner: str, key: str, value: Any, kind: Callable[[str], Any],
            valid: Callable[[Any], bool], expected: str) -> Any:
    """A setting that is ``"auto"`` or a ``kind`` value for which ``valid`` holds; anything
    else is a PlannerError that names the setting and says what was ``expected``."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        v = kind(text)
    except ValueError:
        v = None
    if v is None or not valid(v):
        raise PlannerError(f"planner {planner!r}: {key} must be 'auto' or {expected}, got "
                           f"{value!r}")
    return v


def _words(values: Sequence[Any]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Setting:
    """One planner setting: its type, default, what it accepts and its effect in one line.

    ``low``/``high`` bound a number (``open_low``/``open_high``: the bound itself is
    excluded); ``choices`` lists the accepted values; ``auto`` accepts the word ``auto``
    besides them (the planner decides; the effect says how). ``aliases`` maps former values
    to current ones (accepted, stored as the current one); ``experimental`` marks a setting
    that stays for the studies that use it but is not part of the planner's tuned design.
    """

    name: str
    type: type
    default: Any
    effect: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[Any, ...] | None = None
    auto: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict)
    experimental: bool = False

    def range_text(self) -> str:
        """What the setting accepts besides ``auto``: ``>= 1``, ``in (0, 1]``, ``'a' or 'b'``."""
        if self.choices is not None:
            return _words(self.choices)
        if self.low is not None and self.high is not None:
            lo, hi = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"in {lo}{_num(self.low)}, {_num(self.high)}{hi}"
        if self.low is not None:
            return f"{'>' if self.open_low else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{'<' if self.open_high else '<='} {_num(self.high)}"
        return "any " + ("true/false" if self.type is bool else self.type.__name__)

    def expected(self) -> str:
        """The range as an error message says it (with ``auto``: ``'auto' or an integer >=
        1``)."""
        text = self.range_text()
        if not self.auto:
            return text
        noun = {int: "an integer", float: "a number"}.get(self.type, "a value")
        return f"'auto' or {text}" if self.choices is not None else f"'auto' or {noun} {text}"

    def check(self, planner: str, value: Any) -> Any:
        """``value`` converted to the setting's type and checked; a PlannerError otherwise."""
        if isinstance(value, str) and value in self.aliases:
            value = self.aliases[value]
        if self.auto and str(value).strip().lower() == "auto":
            return "auto"
        try:
            v = coerce(planner, self.name, value, self.type(0) if self.type in (int, float)
                       else self.type())
        except PlannerError:
            if not self.auto:
                raise
            v = None
        if v is None or not self._valid(v):
            raise PlannerError(f"planner {planner!r}: {self.name} must be {self.expected()}, "
                               f"got {value!r}")
        return v

    def _valid(self, v: Any) -> bool:
        if self.choices is not None:
            return v in self.choices
        if self.low is not None and (v < self.low or (self.open_low and v == self.low)):
            return False
        return not (self.high is not None
                    and (v > self.high or (self.open_high and v == self.high)))


class SettingsTable(Mapping[str, Any]):
    """A planner's settings in order; as a mapping, ``name -> default``.

    ``renamed`` maps former setting names to current ones: a former name is still accepted
    (and stored under the current one), so plan files and matrices written with it still run.
    """

    def __init__(self, *settings: Setting, renamed: Mapping[str, str] | None = None) -> None:
        self.rows: dict[str, Setting] = {s.name: s for s in settings}
        self.renamed: dict[str, str] = dict(renamed or {})

    def __getitem__(self, name: str) -> Any:
        return self.rows[name].default

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"SettingsTable({', '.join(self.rows)})"

    def with_defaults(self, **defaults: Any) -> SettingsTable:
        """The same table with other defaults (a planner that shares another's settings)."""
        unknown = sorted(set(defaults) - set(self.rows))
        if unknown:
            raise KeyError(f"no setting(s) {', '.join(unknown)} to give a default")
        rows = [replace(s, default=defaults.get(s.name, s.default)) for s in self.rows.values()]
        return SettingsTable(*rows, renamed=self.renamed)

    def plus(self, *settings: Setting, renamed: Mapping[str, str] | None = None
             ) -> SettingsTable:
        """This table followed by ``settings`` (a row of the same name replaces this one)."""
        rows = {**self.rows, **{s.name: s for s in settings}}
        return SettingsTable(*rows.values(), renamed={**self.renamed, **(renamed or {})})

    def resolve(self, planner: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overlaid with ``given``: names checked, values converted and checked."""
        given = {self.renamed.get(k, k): v for k, v in given.items()}
        unknown = sorted(set(given) - set(self.rows))
        if unknown:
            raise PlannerError(f"planner {planner!r}: unknown setting(s) {', '.join(unknown)}; "
                               f"valid: {', '.join(sorted(self.rows)) or '(none)'}")
        out = dict(self)
        for k, v in given.items():
            out[k] = self.rows[k].check(planner, v)
        return out

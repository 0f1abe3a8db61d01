"""Planner settings: defaults, validation and string coercion (for ``--set key=value``).

A planner declares its settings as a mapping ``name -> default``; what a user passes is
checked against it (an unknown name is an error that lists the valid ones) and strings are
converted to the default's type, so ``--set population=64`` and ``population=64`` agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import PlannerError

__all__ = ["auto_or", "coerce", "resolve_settings"]

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
    except (TypeError, ValueError):
        raise PlannerError(
            f"planner {planner!r}: setting {key}={value!r} is not a valid {kind.__name__}"
        ) from None


def resolve_settings(
    planner: str, defaults: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (validated, coerced)."""
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

"""One base class for every error a user can cause.

The command line turns a :class:`UmpipeError` into one line on stderr and exit code 2; any
other exception is a bug and keeps its traceback (see ``docs/ARCHITECTURE.md``, "Errors").
:class:`UmpipeError` derives from :class:`ValueError`, so code that already catches
``ValueError`` around a problem, plan or budget keeps working.
"""

from __future__ import annotations

__all__ = ["ProfileError", "UmpipeError", "UnknownNameError", "UserInputError"]


class UmpipeError(ValueError):
    """Base class: something the user gave (a file, an option, a name) cannot be used.

    The message names the file, field or stage and what was expected.
    """


class UserInputError(UmpipeError):
    """A command-line option or input file is invalid (an option value, a folder, a path)."""


class UnknownNameError(UmpipeError, KeyError):
    """A problem, planner or model name that no registry knows; the message lists the valid
    names. It is also a :class:`KeyError`, as a failed lookup has always been."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ProfileError(UmpipeError):
    """A profile cannot be taken as asked (model config, grouping, clock, device, link)."""

"""Where a row came from: interpreter and package versions, the git revision, the time.

Versions are read from package metadata, so recording torch's costs nothing (it is not
imported). The git revision is ``git rev-parse`` of the checkout the package runs from, with
``-dirty`` when tracked files differ from it; ``unknown`` outside a git checkout.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

from .leaderboard import VERSION_PACKAGES

__all__ = ["git_revision", "timestamp", "versions"]


@cache
def versions() -> dict[str, str]:
    """``{"python": "3.11.7", "v_numpy": "2.4.6", ...}`` (empty string when not installed)."""
    out = {"python": platform.python_version()}
    for pkg in VERSION_PACKAGES:
        try:
            out[f"v_{pkg.replace('-', '_')}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"v_{pkg.replace('-', '_')}"] = ""
    return out


@cache
def git_revision() -> str:
    """Short commit hash of the package's checkout, ``+dirty`` if modified, or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev}+dirty" if dirty else rev


def timestamp() -> str:
    """Now, UTC, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()

"""Every committed results file has a command that regenerates it.

docs/RESULTS.md ends with a table, "Every results file and its command": per row, glob patterns
(first column), the command(s) that write those files (second column) and what they are. This
checks the table against the tree: every file under ``results/`` that git tracks matches a
pattern, every pattern matches a tracked file (no stale rows), and every command names a script
that exists or a real ``umpipe-bench`` sub-command.

Patterns: ``**`` matches across folders, ``*`` and ``?`` within one path component, and
``{a,b}`` either alternative (not nested).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "docs" / "RESULTS.md"
SECTION = "## Every results file and its command"


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of a manifest pattern (see the module docstring)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")  # zero or more whole folders
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "{":
            end = pattern.index("}", i)
            out.append("(?:" + "|".join(re.escape(a) for a in pattern[i + 1:end].split(",")) + ")")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def manifest(text: str) -> list[tuple[list[str], list[str], str]]:
    """(patterns, commands, what) per table row of the manifest section of ``text``."""
    if SECTION not in text:
        return []
    body = text.split(SECTION, 1)[1]
    body = re.split(r"\n## ", body, maxsplit=1)[0]
    rows = []
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]+\|", line):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if len(cells) < 3 or cells[0].lower().startswith("files"):
            continue  # the header row
        patterns = re.findall(r"`([^`]+)`", cells[0])
        commands = [c.replace("\\|", "|") for c in re.findall(r"`([^`]+)`", cells[1])]
        rows.append((patterns, commands, cells[2]))
    return rows


def tracked_results() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (git ls-files results)")
    out = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [f for f in out.splitlines() if f]


def subcommands() -> set[str]:
    """The sub-commands ``umpipe-bench`` accepts, read from its own parser."""
    from umpipe_bench.cli import build_parser

    parser = build_parser(lazy=True)
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("umpipe-bench's parser has no sub-commands")


def manifest_rows() -> list[tuple[list[str], list[str], str]]:
    found = manifest(RESULTS_MD.read_text(encoding="utf-8"))
    assert found, f"docs/RESULTS.md has no table under {SECTION!r}"
    return found


def test_glob_semantics():
    assert glob_regex("results/real/scatter/**").match("results/real/scatter/a/b.json")
    assert not glob_regex("results/real/*.json").match("results/real/scatter/a.json")
    assert glob_regex("results/real/{a,b}.{csv,json}").match("results/real/b.csv")
    assert not glob_regex("results/real/{a,b}.csv").match("results/real/c.csv")
    assert glob_regex("results/**/x.md").match("results/x.md")


def test_every_row_has_patterns_and_a_command():
    rows = manifest_rows()
    bad = [what for pats, cmds, what in rows if not pats or not cmds or not what]
    assert not bad, f"manifest rows without a pattern, a command or a description: {bad}"


def test_every_results_file_has_a_row():
    rows = manifest_rows()
    regexes = [glob_regex(p) for pats, _, _ in rows for p in pats]
    orphans = [f for f in tracked_results() if not any(r.match(f) for r in regexes)]
    assert not orphans, (f"{len(orphans)} results files match no row of the manifest in "
                         f"docs/RESULTS.md (add a row, or git rm the file): {orphans[:20]}")


def test_every_pattern_matches_a_file():
    rows = manifest_rows()
    files = tracked_results()
    stale = [p for pats, _, _ in rows for p in pats
             if not any(glob_regex(p).match(f) for f in files)]
    assert not stale, f"manifest patterns that match no tracked results file: {stale}"


def test_every_command_exists():
    rows = manifest_rows()
    known = subcommands()
    missing = []
    for _, cmds, _ in rows:
        for cmd in cmds:
            named = False
            for script in re.findall(r"(?<![\w/.-])(scripts/[\w./-]+)", cmd):
                named = True
                if not (ROOT / script).is_file():
                    missing.append(script)
            for sub in re.findall(r"\bumpipe-bench\s+([\w-]+)", cmd):
                named = True
                if sub not in known:
                    missing.append(f"umpipe-bench {sub}")
            if not named:
                missing.append(f"{cmd!r} names neither a script nor a sub-command")
    assert not missing, f"manifest commands that do not exist: {missing}"

"""The documentation as a product: every path it cites exists, the README stays a short guide,
and no file narrates how the work went (no work-session or issue numbers)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("docs", "results", "scripts", "umpipe_bench", "tests", "benchmarks", ".ci")
#: Work-history phrases. Another project's tracker (``pytorch/pytorch#126600``) does not match.
NARRATIVE = re.compile(r"session ?[0-9]|issue ?#?[0-9]|\bthe lea[d]\b|tried[ ]patch|before[:]",
                       re.IGNORECASE)
SCANNED = ("README.md", "docs", "umpipe_bench", "scripts", "results", "tests")
TEXT = {".md", ".py", ".txt", ".sh", ".toml", ".json", ".jsonl", ".csv", ".cfg", ".ini"}


def _ignored(rel: str) -> bool:
    """A path git ignores is an output a command writes (results/leaderboard.csv), not a cite."""
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=ROOT)
    return r.returncode == 0


def _cited(doc: Path) -> list[tuple[str, Path]]:
    """(as written, resolved) for every markdown link and every backticked repository path."""
    text = doc.read_text(encoding="utf-8")
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        if not re.fullmatch(r"[\w./#-]+", target) or not re.search(r"[./]", target):
            continue  # a formula such as [f](m), not a link
        out.append((target, (doc.parent / target.split("#")[0]).resolve()))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # commands may name their outputs
    for span in re.findall(r"`([^`\n]+)`", prose):
        for word in span.split():
            word = word.strip(".,;:()'\"")
            if not word.startswith(tuple(f"{t}/" for t in TOP)) and word not in (
                    "README.md", "pyproject.toml", "tox.ini"):
                continue
            word = word.split("::")[0]
            if re.search(r"[<>*{}]|\bX\.|NNNN", word):
                continue  # a pattern or a placeholder, not a path
            out.append((word, ROOT / word))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_path_exists(doc):
    missing = [w for w, p in _cited(doc)
               if not p.exists() and not _ignored(str(p.relative_to(ROOT)))]
    assert not missing, f"{doc.name} cites paths the repository lacks: {missing}"


def test_readme_is_a_short_guide():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 200, f"README.md has {n} lines; reference material belongs in docs/"


def test_readme_names_the_ci_test_command():
    """.ci/run runs the README's test command; they must stay the same."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    cmd = "python3 -m pip install -e '.[test]' && python3 -m pytest -q"
    assert cmd in readme and cmd.replace("pip install -e", "pip install -q -e") in ci


def test_no_development_narrative():
    hits = []
    for top in SCANNED:
        base = ROOT / top
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for f in files:
            if f.suffix not in TEXT or not f.is_file() or "__pycache__" in f.parts:
                continue
            for i, line in enumerate(f.read_text(encoding="utf-8", errors="ignore")
                                     .splitlines(), 1):
                if NARRATIVE.search(line):
                    hits.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not hits, "work history in the tree:\n" + "\n".join(hits[:50])

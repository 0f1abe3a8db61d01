"""``scripts/chunk_plans.py --from-csv``: the page is made from the rows given, in order, its
first line names how the rows were made and the command that remakes the page from the
``.csv`` beside it; the summary's medians are the rows'."""

from __future__ import annotations

import statistics

import pytest


@pytest.fixture(scope="module")
def script(script_module):
    return script_module("chunk_plans")


def _row(problem, seed, gain):
    T = 1.0 + 0.01 * seed
    return {"problem": problem, "D": 4, "mode": "stash", "seed": seed, "budget": "evals:10",
            "T": T, "layout": "one", "v": 1, "partition": "2-2", "split": True,
            "best_torch": "zb1p", "T_best_torch": T * (1 + gain),
            "speedup_vs_best_torch": gain, "best_reproduced": "zb1p",
            "T_best_reproduced": T * (1 + gain), "speedup_vs_best_reproduced": gain,
            "evaluations": 10, "spaces": 1, "wall_s": 1.5, "process_s": 2.0,
            "memory_cap": "none", "cap_bytes": None, "peak_bytes": None}


def test_from_csv_with_rows_and_their_command(script, tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    script.write_csv(a, [_row("p1", s, g) for s, g in ((0, 0.1), (1, 0.3), (2, 0.2))])
    script.write_csv(b, [_row("p2", 0, -0.05)])
    out = tmp_path / "page"
    assert script.main(["--from-csv", "--rows", str(a), str(b), "--no-wall", "--rows-cmd",
                        "`make rows`", "--out", str(out)]) == 0
    rows = script.read_rows(str(out.with_suffix(".csv")))
    assert [(r["problem"], r["seed"]) for r in rows] == [("p1", 0), ("p1", 1), ("p1", 2),
                                                         ("p2", 0)]
    md = out.with_suffix(".md").read_text(encoding="utf-8").splitlines()
    assert md[2].startswith("Rows (the `.csv` beside this file): `make rows`; this page from "
                            f"them: `python scripts/chunk_plans.py --from-csv --no-wall --out "
                            f"{out}`.")
    med = 100 * statistics.median([0.1, 0.3, 0.2])
    assert any(line.startswith("| p1 | 4 | stash | 3 |") and f"{med:+.2f} %" in line
               for line in md)
    assert any(line.startswith("| p2 | 4 | stash | 1 |") and "-5.00 %" in line for line in md)
    assert "wall (s)" not in "\n".join(md)
    # the page again from the .csv beside it: the same page
    before = out.with_suffix(".md").read_text(encoding="utf-8")
    assert script.main(["--from-csv", "--no-wall", "--rows-cmd", "`make rows`", "--out",
                        str(out)]) == 0
    assert out.with_suffix(".md").read_text(encoding="utf-8") == before


def test_rows_cmd_needs_from_csv(script, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(["--rows-cmd", "x", "--out", "/nonexistent/never"])
    assert exc.value.code == 2
    assert "--rows-cmd go with --from-csv" in capsys.readouterr().err


def test_wall_summary_gives_median_and_worst(script, tmp_path):
    rows = [dict(_row("p1", s, 0.1), wall_s=w, process_s=w + 1.0)
            for s, w in ((0, 10.0), (1, 30.0), (2, 20.0))]
    script.write_csv(tmp_path / "a.csv", rows)
    out = tmp_path / "page"
    assert script.main(["--from-csv", "--rows", str(tmp_path / "a.csv"), "--out",
                        str(out)]) == 0
    md = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "wall (s): median | max | command (s): max |" in md
    assert any(line.startswith("| p1 | 4 | stash | 3 |") and line.endswith(
        "| 20.0 | 30.0 | 31.0 |") for line in md.splitlines())

"""The Gantt picture: every panel's title, with the plan's iteration time T, fits the figure."""

from __future__ import annotations

import pytest

from umpipe_bench.plan import Plan
from umpipe_bench.registry import get_problem
from umpipe_bench.simulator import simulate

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("title", [
    "short",
    "sim-s4-b16-s0 · best plan: tidgap-tuned (F[4,4,4,4] B[2,2,4,8] caps 16,16,12,4, capped, "
    "recompute), +12.3 % vs best EDP",
    "x" * 300,  # one unbreakable word
])
def test_gantt_title_lies_within_the_figure(title, tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from umpipe_bench.trace import gantt_figure, save_gantt

    p = get_problem("sim-s4-b16-s0")
    tl = simulate(p, Plan.edp(p.S, p.B, 4, "stash"), "gpipe")
    fig = gantt_figure([tl, tl], [title, title])
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = fig.bbox
        T = f"T = {tl.iteration_time * 1e3:.2f} ms"
        assert all(ax.get_title(loc="left").startswith(T) for ax in fig.axes)
        titles = [t for t in fig.findobj(Text) if t.get_text().startswith(T)]
        assert len(titles) == 2
        for t in titles:
            ext = t.get_window_extent(renderer)
            assert box.x0 <= ext.x0 and ext.x1 <= box.x1, (ext, box)
            assert box.y0 <= ext.y0 and ext.y1 <= box.y1, (ext, box)
    finally:
        plt.close(fig)
    save_gantt(tl, tmp_path / "g.png", [title])
    assert (tmp_path / "g.png").stat().st_size > 0


# ----------------------------------------------------------------------------- on devices
def _chunk_plan_timeline():
    from umpipe_bench.chunk_torch import simulate_plan
    from umpipe_bench.chunkplan import ChunkPlan

    p = get_problem("gpt1-14")
    plan = ChunkPlan(D=2, layout="loop", layers=(4, 3, 4, 3),
                     fwd=((3, 5, 8), (4, 12), (16,), (8, 8)),
                     bwd=((3, 5, 8), (4, 12), (16,), (8, 8)), mode="stash", split=True,
                     wgt=((8, 8), (16,), (16,), (8, 8)))
    return p, plan, simulate_plan(p, plan)


def test_device_trace_holds_every_operation_with_its_samples():
    """One event per operation of the timeline, on its device's thread, at its times; its
    sample range is the one its chunk's partition gives that microbatch."""
    from umpipe_bench.devsim import parse_action
    from umpipe_bench.trace import device_chrome_trace

    _, plan, tl = _chunk_plan_timeline()
    parts = plan.parts()
    ev = [e for e in device_chrome_trace(tl, parts)["traceEvents"] if e["ph"] == "X"]
    compute = [e for e in ev if e["tid"] % 2 == 0]
    want = [(2 * d, a, t0 * 1e6, (t1 - t0) * 1e6) for d, row in enumerate(tl.ops)
            for a, t0, t1 in row]
    assert [(e["tid"], e["name"], e["ts"], e["dur"]) for e in compute] == want
    for e in compute:
        if e["name"] == "opt":
            continue
        a = parse_action(e["name"])
        sizes = parts[a.chunk][{"F": 0, "B": 1, "I": 1, "W": 2}[a.kind]]
        lo = sum(sizes[:a.mb])
        assert e["args"]["samples"] == [lo, lo + sizes[a.mb]]
        assert e["args"]["device"] == plan.devices[a.chunk] == e["tid"] // 2
    # the weight-gradient pass over all 16 samples of chunk 1
    assert any(e["name"] == "1W0" and e["args"]["samples"] == [0, 16] for e in compute)
    sends = [e for e in ev if e["tid"] % 2 == 1]
    assert len(sends) == len(tl.transfers) > 0
    assert {e["cat"] for e in sends} == {"act", "grad"}


def test_simulate_devices_writes_trace_and_gantt(tmp_path):
    """``simulate --devices`` draws torch's schedules and chunk plans (one row per device)."""
    import json

    from umpipe_bench.cli import main

    _, plan, tl = _chunk_plan_timeline()
    f = tmp_path / "plan.json"
    plan.save(f)
    for spec, extra in ((str(f), []), ("zbv:8", ["--devices", "4"])):
        tr, png = tmp_path / f"t{len(extra)}.json", tmp_path / f"g{len(extra)}.png"
        assert main(["simulate", "--problem", "gpt1-14", "--plan", spec, *extra, "--trace",
                     str(tr), "--gantt", str(png)]) == 0
        data = json.loads(tr.read_text())
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        names = {e["name"] for e in data["traceEvents"] if e["ph"] == "X"}
        if spec == str(f):
            assert data["otherData"]["iteration_time_s"] == tl.iteration_time
            assert "1W0" in names and "0I2" in names
        else:
            assert data["otherData"]["schedule"] == "zbv" and "7W7" in names


def test_simulate_devices_refuses_a_folder_as_trace_before_simulating(tmp_path, capsys):
    from umpipe_bench.cli import main

    png = tmp_path / "g.png"
    assert main(["simulate", "--problem", "vgg16", "--devices", "4", "--plan", "zbv:8",
                 "--gantt", str(png), "--trace", str(tmp_path)]) == 2
    assert "--trace" in capsys.readouterr().err and not png.exists()

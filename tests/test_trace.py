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

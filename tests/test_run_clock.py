"""Budgets are limits: every phase of a run is on one clock (planners.evaluation.clock).

Nothing here measures a wall time: the tests check what holds by construction (a stub
objective that sleeps sees the deadline between compiled calls, no compiled call gets more
than ``chunk_rows`` rows, a cut-short run returns a valid plan whose T is its re-simulation,
chunking changes no result). results/perf/budgets-signals.md has the timings.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from umpipe_bench.errors import TimeUp
from umpipe_bench.plan import Plan
from umpipe_bench.planners.algorithms.descent import stage_descent
from umpipe_bench.planners.algorithms.greedy import greedy_dp_plan
from umpipe_bench.planners.evaluation import clock as clock_mod
from umpipe_bench.planners.evaluation import reference
from umpipe_bench.planners.evaluation.clock import RunClock, chunk_rows, running
from umpipe_bench.planners.evaluation.encoding import edp_bits, random_bits
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.planners.evaluation.objective import FamilyObjective, Genomes, JoinedGenomes
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.planners.search.loop import SearchLoop, Termination, TrackedAlgorithm
from umpipe_bench.registry import get_planner, get_problem
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem

#: Big enough that a batch spans several compiled calls (chunk_rows: 7 rows).
BIG = (64, 1024, 0)


@pytest.fixture(scope="module")
def big():
    return synthetic_problem(*BIG)


class _SleepyObjective:
    """Sleeps 20 ms a call, so a deadline of 0.1 s allows at most 6 calls."""

    def __init__(self) -> None:
        self.problem = SimpleNamespace(S=100, B=5000)  # chunk_rows: 1 row a call
        self.calls: list[int] = []

    def evaluate(self, genomes):
        self.calls.append(len(genomes))
        time.sleep(0.02)
        return np.arange(len(genomes), 0, -1, dtype=float)

    def decode(self, genomes, i=0):  # pragma: no cover - not used
        raise NotImplementedError


class _OneBatch(TrackedAlgorithm):
    def setup(self, evaluate):
        evaluate(np.zeros((50, 3)))

    def ask_size(self):
        return 50

    def ask(self):
        return np.zeros((50, 3))

    def tell(self, genomes, times):
        pass


def test_a_deadline_is_seen_between_the_compiled_calls_of_one_batch():
    obj = _SleepyObjective()
    loop = SearchLoop(obj, Termination(Budget(seconds=0.1)))
    algo = _OneBatch()
    loop.run(algo)
    assert loop.stopped == "time" and loop.stopped_in == "setup"
    assert set(obj.calls) == {1} and len(obj.calls) <= 6 < 50
    assert loop.evaluations == len(obj.calls)
    genome, T = loop.result(algo)
    assert T == 1.0 and genome.shape == (1, 3)


def _record(monkeypatch, module, name):
    sizes: list[int] = []
    real = getattr(module, name)

    def spy(*args):
        sizes.append(len(args[0]) if name != "bernoulli_rows" else len(args[2]))
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return sizes


def test_no_compiled_call_gets_more_than_chunk_rows(monkeypatch, big):
    from umpipe_bench.planners.evaluation import _family_kernels, _kernels, _random_kernels

    fam = _record(monkeypatch, _family_kernels, "family_pass")
    fwd = _record(monkeypatch, _kernels, "forward_pass")
    bwd = _record(monkeypatch, _kernels, "backward_pass")
    rnd = _record(monkeypatch, _random_kernels, "bernoulli_rows")
    S, B = big.S, big.B
    step = chunk_rows(S, B)
    bits = random_bits(np.random.default_rng(0), 40, S, B)
    FamilyEvaluator(big, "recompute", threads=2)(bits, bits, np.full(S, B))
    PopulationEvaluator(big, "recompute", "numba", threads=2)(bits, bits)
    reference.edp_scan(big, "stash", "1f1b")
    for sizes in (fam, fwd, bwd, rnd):
        assert sizes and max(sizes) <= step < 40


def test_a_whole_run_makes_short_compiled_calls_only(monkeypatch):
    from umpipe_bench.planners.evaluation import _family_kernels

    problem = synthetic_problem(32, 512, 1)
    sizes = _record(monkeypatch, _family_kernels, "family_pass")
    res = get_planner("tidgap").plan(problem, mode="stash", budget="evals:1500", seed=0)
    assert res.evaluations <= 1500
    assert sizes and max(sizes) <= chunk_rows(problem.S, problem.B)


@pytest.mark.parametrize("planner", ["tidgap", "random-search",
                                     pytest.param("dgap", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_chunking_changes_no_result(monkeypatch, planner, mode):
    """The same seed and evaluation budget give the same plan, T and count whether every
    compiled call gets one row or the whole batch."""
    problem = get_problem("vgg16")
    budget = "evals:1500" if planner == "dgap" else "evals:4000"
    runs = []
    for work in (1, 10**12):
        monkeypatch.setattr(clock_mod, "CHUNK_WORK", work)
        reference.clear_cache()
        res = get_planner(planner).plan(problem, mode=mode, budget=budget, seed=3)
        runs.append((res.iteration_time, res.evaluations, res.schedule,
                     res.plan.to_dict()["fwd"], res.plan.to_dict()["bwd"], res.plan.caps))
    assert runs[0] == runs[1]


def test_a_time_budget_that_ends_in_seeding_returns_the_best_plan_so_far(big):
    res = get_planner("tidgap").plan(big, mode="stash", budget="secs:0.001", seed=0)
    assert res.stopped is not None and "during seeding" in res.stopped
    assert res.interrupted is None
    res.plan.validate(big)
    assert simulate(big, res.plan, res.schedule).iteration_time == res.iteration_time
    # never worse than the EDP plans it scanned
    ref = reference.edp_reference(big, "stash", partial=True)
    assert res.iteration_time <= ref.best_T


def test_the_reference_scans_stop_and_resume_on_the_clock():
    problem = synthetic_problem(32, 512, 2)
    reference.clear_cache()
    with running(RunClock(seconds=0.0)):
        part = reference.edp_scan(problem, "stash", "1f1b", partial=True)
        assert 0 < part.scanned < problem.B and not part.complete
        with pytest.raises(TimeUp):
            reference.edp_scan(problem, "stash", "1f1b")
        ref = reference.edp_reference(problem, "stash", partial=True)
        assert set(ref.incomplete) == {"gpipe", "1f1b"}
    resumed = reference.edp_scan(problem, "stash", "1f1b")  # no clock: to the end
    reference.clear_cache()
    fresh = reference.edp_scan(problem, "stash", "1f1b")
    assert resumed.complete and np.array_equal(resumed.times, fresh.times)
    assert np.array_equal(resumed.peaks, fresh.peaks)


def test_the_seed_scan_shares_the_reference_scan_and_its_numbers():
    """EDP genomes are answered from the GPipe-EDP reference scan: the same T as evaluating
    them, memory caps included."""
    base = synthetic_problem(8, 64, 0)
    for problem in (base, base.with_memory_cap(0.6 * max(simulate(
            base, Plan.edp(8, 64, 8, "stash"), "gpipe").peak_memory))):
        obj = FamilyObjective(problem, "stash")
        f = np.stack([edp_bits(8, 64, M) for M in range(1, 65)])
        direct = obj.evaluate(Genomes(f, f))
        shared = obj.evaluate(Genomes(f, f, edp=range(1, 65)))
        assert np.array_equal(direct, shared)
        assert np.array_equal(obj.evaluate(Genomes(f[9:20], f[9:20], edp=range(10, 21))),
                              direct[9:20])


def test_joined_genomes_read_as_one_batch():
    rng = np.random.default_rng(1)
    parts = [Genomes(f, f, rng.integers(1, 9, (len(f), 3))) for f in (
        rng.integers(0, 2, (n, 3, 7)).astype(np.uint8) for n in (4, 1, 5))]
    joined = JoinedGenomes(parts)
    whole = Genomes(np.concatenate([g.fwd for g in parts]), None,  # type: ignore[arg-type]
                    np.concatenate([g.caps for g in parts]))
    assert len(joined) == 10
    for a, b in ((0, 4), (4, 5), (2, 9), (0, 10), (6, 8)):
        g = joined.rows(a, b)
        assert np.array_equal(g.fwd, whole.fwd[a:b]) and g.bwd is g.fwd
        assert np.array_equal(g.caps, whole.caps[a:b])
    assert joined.rows(0, 4).fwd.base is not None  # within a part: a view


def test_greedy_dp_gives_up_when_it_cannot_finish_in_time(big):
    assert greedy_dp_plan(big, "stash", max_seconds=0.0) is None
    assert greedy_dp_plan(synthetic_problem(1, 8, 0), "stash", max_seconds=0.0) is not None
    assert greedy_dp_plan(synthetic_problem(3, 8, 0), "recompute") is not None


def test_the_descent_stops_at_its_share_of_the_time():
    problem = synthetic_problem(6, 32, 1)
    obj = FamilyObjective(problem, "stash")
    f = edp_bits(6, 32, 4)
    T = float(obj.evaluate(Genomes(f[None], f[None]))[0])
    first = []

    def evaluate(g):
        first.append(len(g))
        return obj.evaluate(g)

    d = stage_descent(evaluate, f, f, None, T, "stash", max_seconds=0.0)
    assert d.evaluations == first[0] and len(first) == 1


def test_a_long_caps_list_is_shortened_in_the_summary():
    caps = (2048,) * 113 + (1920, 1792, 1664, 1536, 1408, 1280, 1037, 1024, 896, 768, 640, 512,
                            384, 256, 128)
    plan = Plan.edp(128, 2048, 16, "stash").with_caps(caps)
    text = plan.describe()
    assert text.startswith("EDP(16) caps=[2048 x113, 1920, 1792, 1664, ... (8 more), ")
    assert text.endswith("512, 384, 256, 128]") and len(text) < 100
    small = Plan.edp(4, 8, 2, "stash").with_caps((8, 8, 6, 4))
    assert small.describe() == "EDP(2) caps=[8, 8, 6, 4]"



def test_the_optuna_planners_read_the_clock_inside_an_ask():
    """An ask of Optuna's samplers is one suggestion per gene (a batch of 32 trials at 8,160
    genes takes seconds): past the deadline it stops between blocks of them."""
    pytest.importorskip("optuna")
    from umpipe_bench.api import PipelineObjective
    from umpipe_bench.baselines import outside
    from umpipe_bench.baselines.optuna_planner import OptunaTPE, TPEAlgorithm

    problem = get_problem("vgg16")
    obj = PipelineObjective(problem, "stash")
    ga = outside._NSGA2(obj, dict(outside.OptunaGA().config), 0, None)
    ga.x0, ga.start_time = obj.start_genome(), 1.0
    ga._start()
    tpe = TPEAlgorithm(problem, "stash", dict(OptunaTPE().config), 0)
    with running(RunClock(seconds=0.0)):
        with pytest.raises(TimeUp):
            ga._ask()
        with pytest.raises(TimeUp):
            tpe.ask()
    assert ga._ask().shape == (ga.popsize, obj.space.dimension)  # no clock: the whole batch
    # a trial whose ask took 10 s is not followed by one that the deadline 15 s away could
    # not hold, before the sampler's search-space inference (one library call) starts
    ga._trials.last = 10.0
    asked = []
    ga.study.ask = lambda: asked.append(1)  # type: ignore[method-assign]
    with running(RunClock(seconds=15.0)):
        with pytest.raises(TimeUp):
            ga._ask()
    assert asked == []


@pytest.mark.parametrize("name", ["cmaes", "optuna-cmaes"])
def test_cma_refuses_a_genome_whose_calls_cannot_be_interrupted(name):
    pytest.importorskip("cmaes")
    from umpipe_bench.baselines.outside import CMA_MAX_GENES
    from umpipe_bench.errors import InputError

    planner = get_planner(name)
    budget = Budget(evaluations=10**6)
    for problem, mode, genes in ((synthetic_problem(32, 256, 0), "stash", "8,160"),
                                 (get_problem("vgg16"), "recompute", "992")):
        with pytest.raises(InputError, match=f"{genes} genes, over the {CMA_MAX_GENES:,}"):
            planner.check_run(problem, mode, dict(planner.config), budget)
    planner.check_run(get_problem("vgg16"), "stash", dict(planner.config), budget)  # 496


def test_a_one_shot_planner_says_it_ignores_a_time_budget(capsys):
    from umpipe_bench.cli import main

    for planner, warned in (("gpipe", True), ("1f1b", True), ("tidgap", False)):
        assert main(["plan", "--problem", "sim-s2-b8-s0", "--planner", planner, "--budget",
                     "secs:1", "--json", "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert ("ignores the time budget secs:1" in err) is warned, (planner, err)


def test_the_tuned_planner_runs_on_the_run_clock(big):
    """tidgap-tuned runs TiDGAP on the caller's clock, not on one of its own: a deadline
    passed before the planner starts ends it in its seeding."""
    planner = get_planner("tidgap-tuned")
    assert planner.timed
    res = planner.plan(big, mode="stash", budget="secs:0.001", seed=0)
    assert res.planner == "tidgap-tuned"
    assert res.stopped is not None and "during seeding" in res.stopped
    clock = planner.clock_for(Budget.parse("secs:100"))
    clock.end = clock.start  # the command's deadline has passed already
    res = planner.plan(big, mode="stash", budget="secs:100", seed=0, clock=clock)
    assert res.stopped is not None and "during seeding" in res.stopped


@pytest.mark.parametrize("with_link", [False, True])
def test_the_prefix_dp_in_blocks_is_the_dp_and_reads_the_clock_between(with_link):
    """greedy-dp's compiled DP runs in blocks of prefixes with a check between them (one
    call over B = 2048 took seconds, holding a signal off); any blocking gives the same ends
    as one call, and what runs between the blocks can end it."""
    from umpipe_bench.planners.algorithms.greedy import pareto_prefix_dp
    from umpipe_bench.planners.evaluation._prefix_dp import prefix_dp

    rng = np.random.default_rng(3)
    B = 300
    cost = np.concatenate([[0.0], np.cumsum(rng.random(B) + 0.1)]) ** 0.8
    link = rng.random(B + 1) * 2 if with_link else cost
    R = np.concatenate([[0.0], np.sort(rng.random(B) * 5)])
    whole = prefix_dp(R, cost, link, with_link, 0.25, block_seconds=1e9)  # few blocks
    calls = []
    blocks = prefix_dp(R, cost, link, with_link, 0.25, lambda: calls.append(1),
                       block_seconds=1e-9)
    assert blocks.tolist() == whole.tolist() and len(calls) >= B // 4
    ref = pareto_prefix_dp(R, cost, link if with_link else None, 0.25)
    assert tuple(np.diff(whole, prepend=0).tolist()) == ref

    def stop():
        raise TimeUp("deadline")

    with pytest.raises(TimeUp):
        prefix_dp(R, cost, link, with_link, 0.25, stop, block_seconds=1e-9)


def test_a_library_call_starts_only_if_twice_the_last_one_fits():
    """LibraryCalls: the first call always starts (no last time), a call is timed, and the
    next one is refused when twice that time passes the deadline."""
    from umpipe_bench.planners.evaluation.clock import LibraryCalls

    calls = LibraryCalls()
    with running(RunClock(seconds=3600.0)):
        with calls.call():
            pass
        assert 0.0 <= calls.last < 1.0
        calls.last = 1000.0  # twice 1,000 s still fits an hour
        with calls.call():
            pass
        assert calls.last < 1.0
    calls.last = 10.0
    with running(RunClock(seconds=15.0)):
        with pytest.raises(TimeUp):
            with calls.call():
                raise AssertionError("must not start")

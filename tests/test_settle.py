"""TiDGAP's default budget: restart rounds until settled, each followed by the iterated descent
of the best plan so far, which starts with the pair descent (docs/SEARCH.md, "Stopping"; the
kicks: tests/test_iterated.py). Known by construction: the stop rule on given round
results, determinism per seed, the caps, and the pair descent's end being a local optimum of
its moves (checked by trying them all). Every run here is one search (``searches=1``); searches
side by side: tests/test_side_by_side.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from umpipe_bench.planners.algorithms import tidgap
from umpipe_bench.planners.algorithms._tidgap_settings import Settle, settle_budget
from umpipe_bench.planners.algorithms.pair_descent import REACH, pair_descent, pair_sweep_cost
from umpipe_bench.planners.evaluation.objective import FamilyObjective, Genomes
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.settle import SettlingRestarts
from umpipe_bench.synthetic import synthetic_problem

SMALL = synthetic_problem(4, 12, 3)
#: A rule small enough for the fast tier: rounds of 2,000 evaluations.
QUICK = Settle(round_floor=2000, round_per_bit=1, min_rounds=2, max_rounds=6, patience=1,
               double_every=0)


def _settled(best: list[float], **kw: object) -> bool:
    args: dict = dict(round_evaluations=10, max_rounds=8, min_rounds=3, patience=2,
                      tolerance=1e-3)
    args.update(kw)
    e = SettlingRestarts(lambda b, ss: None, Budget(evaluations=10**6), 0, **args)  # type: ignore[arg-type, return-value]
    e.round_best = list(best)
    return e.settled()


@pytest.mark.parametrize("best, settled", [
    ([1.0], False),                      # fewer than min_rounds
    ([1.0, 1.0], False),
    ([1.0, 1.0, 1.0], True),             # two rounds without a gain
    ([1.0, 0.99, 0.98], False),          # still paying
    ([1.0, 0.9995, 0.9992], True),       # 0.08 % over the last two rounds: below 0.1 %
    ([1.0, 0.98, 0.98, 0.97], False),    # the last round paid
    ([1.0, 0.98, 0.97, 0.97, 0.97], True),
    ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3], True),  # max_rounds
])
def test_the_stop_rule_reads_the_rounds(best, settled):
    assert _settled(best) is settled


def test_rounds_double_every_two_up_to_the_cap():
    e = SettlingRestarts(lambda b, ss: None, Budget(evaluations=10**9), 0,  # type: ignore[arg-type, return-value]
                         round_evaluations=100, max_rounds=12, min_rounds=3, patience=2,
                         tolerance=1e-3, double_every=2, max_doublings=3)
    assert [e.round_size(r) for r in range(10)] == [100, 100, 200, 200, 400, 400, 800, 800,
                                                    800, 800]
    rule = Settle(round_floor=100, round_per_bit=0, max_rounds=10, polish_share=1.0)
    assert settle_budget(SMALL, rule).evaluations == 2 * sum(e.round_size(r)
                                                             for r in range(10))


def test_a_fixed_budget_string_never_settles():
    """Only the planner's default carries the stop rule: `--budget` strings stay fixed."""
    assert not Budget.parse("evals:1000,secs:60").settle
    with pytest.raises(PlannerError, match="not one of evals:N, gens:N, secs:X"):
        Budget.parse("settle")
    b = settle_budget(SMALL)
    assert b.settle and b.seconds == 60.0 and b.evaluations is not None
    assert str(b).startswith("settle (at most evals:")
    assert tidgap.TiDGAP().budget_for(SMALL) == b


def test_default_run_settles_deterministically_within_its_cap(monkeypatch):
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    budget = settle_budget(SMALL, QUICK)
    a = tidgap.TiDGAP(searches=1).plan(SMALL, mode="recompute", seed=3)
    b = tidgap.TiDGAP(searches=1).plan(SMALL, mode="recompute", seed=3)
    assert a.plan == b.plan and a.iteration_time == b.iteration_time
    assert a.evaluations == b.evaluations
    assert a.settings["restarts"] == "settle"
    assert budget.evaluations is not None and a.evaluations <= budget.evaluations
    # at least min_rounds rounds of 2,000, at most max_rounds with their polishes
    assert 2 * 2000 * 0.9 < a.evaluations <= 6 * (2000 + int(QUICK.polish_share * 2000))
    fixed = tidgap.TiDGAP(searches=1).plan(SMALL, mode="recompute", seed=3,
                                           budget="evals:3000")
    assert fixed.settings["restarts"] != "settle" and fixed.evaluations <= 3000


def test_plan_json_names_the_stop_rule(monkeypatch, capsys):
    from umpipe_bench.cli import main

    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    assert main(["plan", "--problem", "sim-s4-b12-s3", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget"].startswith("settle (at most evals:")
    searches = out["settings"]["searches"]  # side by side: as many as the cores, at most 2
    assert searches in (1, 2)
    assert out["evaluations"] <= searches * 6 * (2000 + int(QUICK.polish_share * 2000))


def test_a_run_the_cap_ends_says_so_and_a_run_the_rule_ends_does_not(monkeypatch, capsys):
    """The default budget's seconds are a cap, not the rule: a run they end before the rule
    holds says so (stderr, --json's "stopped"); a fixed time budget ends as it says."""
    from dataclasses import replace

    from umpipe_bench.cli import main

    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    ended = tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=1)  # compiles the kernels
    assert ended.stopped is None
    slow = replace(QUICK, round_floor=10**9, seconds=2.0)  # a first round far past the cap
    monkeypatch.setattr(tidgap, "SETTLE", slow)
    cut = tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=1)
    assert cut.stopped is not None
    assert cut.stopped.startswith("the default budget's 2 s cap ended the search after ")
    assert "evaluations and 0 whole rounds, before its stop rule held" in cut.stopped
    fixed = tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=1, budget="secs:2")
    assert fixed.stopped is None
    assert main(["plan", "--problem", "sim-s4-b12-s3", "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "cap ended the search" in json.loads(out)["stopped"]
    assert err.startswith("umpipe-bench plan: the default budget's 2 s cap ended the search")


def _all_moves(f: np.ndarray, k: np.ndarray, B: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every single and within-reach pair flip of each stage, and every cap step (stash)."""
    S, L = f.shape
    out = []
    for s in range(S):
        for i in range(L):
            for j in range(i, min(L, i + REACH + 1)):
                g = f.copy()
                g[s, i] ^= 1
                if j != i:
                    g[s, j] ^= 1
                out.append((g, k))
        for step in (-4, -2, -1, 1, 2, 4):
            c = k.copy()
            c[s] = min(B, max(1, c[s] + step))
            out.append((f, c))
    return out


def test_pair_descent_ends_at_a_local_optimum_of_its_moves():
    p = synthetic_problem(3, 8, 1)
    obj = FamilyObjective(p, "stash")
    rng = np.random.default_rng(0)
    f = rng.integers(0, 2, (1, 3, 7), dtype=np.uint8)
    k = np.full((1, 3), 8, np.int64)
    T0 = float(obj.evaluate(Genomes(f, f, k))[0])
    cost = pair_sweep_cost(3, 8, "stash", True)
    r = pair_descent(obj.evaluate, Genomes(f, f, k), T0, "stash", 50 * cost)
    assert r.time <= T0 and r.evaluations <= 50 * cost
    g, c = r.genome.fwd[0], r.genome.caps[0]  # type: ignore[index]
    assert float(obj.evaluate(r.genome)[0]) == r.time
    moves = _all_moves(g, c, 8)
    F = np.stack([m[0] for m in moves])
    K = np.stack([m[1] for m in moves])
    assert obj.evaluate(Genomes(F, F, K)).min() >= r.time * (1 - 1e-5)


def test_pair_descent_keeps_to_its_allowance():
    p = synthetic_problem(3, 8, 1)
    obj = FamilyObjective(p, "recompute")
    f = np.zeros((1, 3, 7), np.uint8)
    k = np.full((1, 3), 8, np.int64)
    T0 = float(obj.evaluate(Genomes(f, f, k))[0])
    for room in (0, 5, 40, 100):
        r = pair_descent(obj.evaluate, Genomes(f, f.copy(), k), T0, "recompute", room)
        assert r.evaluations <= room and r.time <= T0


def test_the_progress_phase_names_the_descent_and_returns_to_the_search(monkeypatch):
    """A later round's initial population hands the phase back; the polish names itself (the
    progress bar's ``phase=`` and the line a signal prints)."""
    from umpipe_bench.planners.evaluation import clock as clock_mod

    seen: list[str] = []
    tick = clock_mod.RunClock.tick

    def noted(self, *a, **k):  # type: ignore[no-untyped-def]
        seen.append(self.phase)
        return tick(self, *a, **k)

    monkeypatch.setattr(clock_mod.RunClock, "tick", noted)
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=1)
    assert "the iterated descent" in seen
    runs = [p for i, p in enumerate(seen) if i == 0 or seen[i - 1] != p]
    # every initial population after the first is followed by the search again
    after = [runs[i + 1] for i, p in enumerate(runs[:-1]) if p == "the initial population"]
    assert after and all(p == "the search" for p in after[1:]), runs
    assert seen[-1] != "the initial population"


class _Round:
    """A search round whose own best is a given T after one batch of 10 evaluations."""

    def __init__(self, T: float) -> None:
        self.T, self.used, self.generation = T, 0, 0
        self.seeds = self.preset_seeds = None
        self.g = Genomes(np.zeros((1, 2, 3), np.uint8), np.zeros((1, 2, 3), np.uint8))

    def setup(self, evaluate: object) -> None:
        pass

    def ask_size(self) -> int:
        return 10

    def ask(self) -> Genomes:
        return self.g

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        self.used += 10
        self.generation += 1

    def best(self) -> tuple[Genomes, float]:
        return self.g, self.T

    @property
    def best_time(self) -> float:
        return self.T if self.used else float("inf")

    start_time = 0.0


def _drive(round_T: list[float], polish_gain: float | list[float], ga_rounds: int | None,
           polish_own: bool = False, agree: float | None = None
           ) -> tuple[SettlingRestarts, list[float]]:
    """Run the rule on rounds of given own bests and a polish that lowers T by a factor (one
    for every call, or the k-th of a list on the k-th call)."""
    polished: list[float] = []

    def polish(evaluate, genome, T, allowance, rng):  # type: ignore[no-untyped-def]
        gain = polish_gain if isinstance(polish_gain, float) else polish_gain[len(polished)]
        polished.append(T)
        return genome, T * gain, 5

    e = SettlingRestarts(lambda b, ss: _Round(round_T[len(e.engines)]),
                         Budget(evaluations=10**6), 0, round_evaluations=10, max_rounds=8,
                         min_rounds=3, patience=2, tolerance=1e-3, polish=polish,
                         ga_rounds=ga_rounds, polish_own=polish_own, agree=agree)
    e.setup(lambda g: np.zeros(len(g)))
    while not e.finished:
        g = e.ask()
        e.tell(g, np.zeros(len(g)))
    return e, polished


def test_rounds_whose_search_stops_paying_become_the_polish_alone():
    # the search's own bests never beat the best so far after round 0: from round 2 on the
    # rounds are the polish alone, each of the best plan so far
    e, polished = _drive([10.0, 11.0, 12.0, 9.0] + [1.0] * 4, 0.99, ga_rounds=2)
    assert len(e.engines) == 2 and len(e.round_best) == 8  # max_rounds: the polish kept paying
    assert polished == pytest.approx([10.0 * 0.99 ** k for k in range(8)])
    assert e.best_time == pytest.approx(10.0 * 0.99 ** 8)
    # every round the search (None): the third round's own best, 9.0, is found; with
    # ga_rounds=2 the second round did not pay, so the third is the polish alone (the trade)
    e, _ = _drive([10.0, 11.0, 9.0] + [20.0] * 5, 1.0, ga_rounds=None)
    assert len(e.engines) == len(e.round_best) == 5 and e.best_time == 9.0
    e, _ = _drive([10.0, 11.0, 9.0] + [20.0] * 5, 1.0, ga_rounds=2)
    assert len(e.engines) == 2 and len(e.round_best) == 3 and e.best_time == 10.0
    # a search round that pays keeps the next one a search round
    e, _ = _drive([10.0, 9.0, 8.0, 7.0, 20.0, 20.0, 20.0, 20.0], 1.0, ga_rounds=2)
    assert len(e.engines) == 5 and len(e.round_best) == 6 and e.best_time == 7.0


def test_a_stalled_polish_gives_the_search_its_turn_again():
    # round 2 is the polish alone and pays (10 -> 9), round 3 the polish alone and stalls, so
    # round 4 runs the search again: its own best, 8.5, becomes the best plan
    gains = [1.0, 1.0, 0.9] + [1.0] * 5
    e, polished = _drive([10.0, 11.0, 8.5] + [20.0] * 5, gains, ga_rounds=2)
    assert len(e.engines) == 5 and len(e.round_best) == 7 and e.best_time == 8.5
    assert e.round_best == pytest.approx([10.0, 10.0, 9.0, 9.0, 8.5, 8.5, 8.5])
    assert polished == pytest.approx([10.0, 10.0, 10.0, 9.0, 8.5, 8.5, 8.5])


def test_polish_own_starts_a_search_rounds_polish_from_that_rounds_own_best():
    # round 1's own best (11.0) is worse than round 0's polished plan (9.0); polished from
    # itself it ends at 8.8 and becomes the best plan, so round 1 paid and round 2 searches
    gains = [0.9, 0.8] + [1.0] * 6
    e, polished = _drive([10.0, 11.0, 12.0] + [20.0] * 5, gains, ga_rounds=2, polish_own=True)
    assert polished[:3] == pytest.approx([10.0, 11.0, 12.0])
    assert e.round_best[:2] == pytest.approx([9.0, 8.8])
    # round 2's own polish did not beat the best plan: the rest of its allowance polishes
    # the best plan so far
    assert polished[3] == pytest.approx(8.8)
    assert len(e.engines) >= 3
    # without it every polish starts from the best plan so far, and round 1 did not pay:
    # round 2 is the polish alone
    e, polished = _drive([10.0, 11.0, 12.0] + [20.0] * 5, gains, ga_rounds=2)
    assert polished[:3] == pytest.approx([10.0, 9.0, 7.2])
    # the rounds of the polish alone start from the best plan so far either way
    e, polished = _drive([10.0, 11.0] + [20.0] * 6, [0.9, 1.0, 0.5] + [1.0] * 5, ga_rounds=2,
                         polish_own=True)
    assert polished[:3] == pytest.approx([10.0, 11.0, 9.0])


def _spy_descent(monkeypatch, index: int, name: str) -> list:  # type: ignore[no-untyped-def]
    """The value of the default budget's iterated descent's argument ``name`` (position
    ``index``) at every call, with the quick rule."""
    seen: list = []
    real = tidgap.iterated_descent

    def spy(*args, **kw):  # type: ignore[no-untyped-def]
        seen.append(args[index] if len(args) > index else kw[name])
        return real(*args, **kw)

    monkeypatch.setattr(tidgap, "iterated_descent", spy)
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    return seen


def test_the_reach_and_polish_own_settings_reach_the_default_budget(monkeypatch):
    """TiDGAP's ``reach`` (default 1) is the pair descent's reach inside the default budget's
    iterated descent; ``polish_own`` (default true) reaches the rounds."""
    seen = _spy_descent(monkeypatch, 7, "reach")
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=0)
    tidgap.TiDGAP(reach=3, searches=1).plan(SMALL, mode="stash", seed=0)
    assert seen and set(seen) == {1, 3}
    owns: list[bool] = []
    real_init = tidgap.SettlingRestarts.__init__

    def init(self, *args, **kw):  # type: ignore[no-untyped-def]
        owns.append(kw["polish_own"])
        real_init(self, *args, **kw)

    monkeypatch.setattr(tidgap.SettlingRestarts, "__init__", init)
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=0)
    tidgap.TiDGAP(polish_own=False, searches=1).plan(SMALL, mode="stash", seed=0)
    assert owns == [True, False]
    with pytest.raises(PlannerError, match="reach"):
        tidgap.TiDGAP(reach=0)


def test_the_run_goes_on_while_a_fresh_round_ends_far_from_the_best():
    # round 0 ends at 10.0; every later search round, polished, at 11.0 (10 % above): with
    # agree=1 % the rule, which would stop after round 3 (patience 2), runs to max_rounds,
    # alternating the polish alone and fresh rounds
    e, _ = _drive([10.0] + [11.0] * 7, 1.0, ga_rounds=2, polish_own=True)
    assert len(e.round_best) == 3
    e, _ = _drive([10.0] + [11.0] * 7, 1.0, ga_rounds=2, polish_own=True, agree=0.01)
    assert len(e.round_best) == 8 and len(e.engines) > 2
    assert e.search_polished == 11.0
    # fresh rounds that end within 1 % of the best agree: the rule stops as without agree
    e, _ = _drive([10.0] + [10.05] * 7, 1.0, ga_rounds=2, polish_own=True, agree=0.01)
    assert len(e.round_best) == 3


def test_the_columns_setting_reaches_the_default_budget(monkeypatch):
    """TiDGAP's ``columns`` (default true) is the iterated descent's ``columns``."""
    seen = _spy_descent(monkeypatch, 8, "columns")
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=0)
    assert seen and set(seen) == {True}
    seen.clear()
    tidgap.TiDGAP(columns=False, searches=1).plan(SMALL, mode="stash", seed=0)
    assert seen and set(seen) == {False}


def test_the_hub_setting_reaches_the_default_budget(monkeypatch):
    """TiDGAP's ``hub`` is the iterated descent's ``hub``: ``auto`` gives 0.25 in both modes
    (HUB_AUTO), a number is passed as it is, anything outside [0, 1] is refused."""
    seen = _spy_descent(monkeypatch, 9, "hub")
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=0)
    assert seen and set(seen) == {0.25}
    seen.clear()
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="recompute", seed=0)
    assert seen and set(seen) == {0.25}
    seen.clear()
    tidgap.TiDGAP(hub=0, searches=1).plan(SMALL, mode="recompute", seed=0)
    assert seen and set(seen) == {0.0}
    seen.clear()
    tidgap.TiDGAP(hub=0.5, searches=1).plan(SMALL, mode="recompute", seed=0)
    assert seen and set(seen) == {0.5}
    with pytest.raises(PlannerError, match="hub"):
        tidgap.TiDGAP(hub=1.5)

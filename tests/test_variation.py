"""TiDGAP's compiled variation (planners/search/_variation.py): the operators' invariants, known by
construction (docs/MODEL.md §2 encoding), and the lean generation (no plan decoding per
generation)."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.tidgap import TiDGAP, TiDGAPEngine
from umpipe_bench.planners.search import _variation as V
from umpipe_bench.synthetic import synthetic_problem


def _vary(cur_f, times, n_off, *, tournament=2, cxpb=0.7, mutpb=0.6, flip=1.0, shift=2.0,
          stage_len=None, seed=0, cur_b=None, cur_k=None, cap_rate=0.0,
          B=2, copy=0.0, sync=0.0):
    rng = np.random.default_rng(seed)
    P, L = cur_f.shape
    recompute = cur_b is not None
    cb = cur_b if recompute else cur_f
    nf = np.zeros_like(cur_f)
    nb = np.zeros_like(cur_f) if recompute else nf
    nt = np.full(P, np.nan)
    ck = np.zeros((P, 0), np.int64) if cur_k is None else cur_k
    nk = np.zeros_like(ck)
    args = (cur_f, cb, times, nf, nb, nt, n_off, tournament, cxpb, mutpb, flip, shift, copy,
            stage_len or L, recompute, ck, nk, cap_rate, B,
            V.cap_ties(ck, B), sync, np.zeros(1, np.int64))
    nc = V.vary(rng.random(8), *args)
    assert nc == -1  # too few uniforms: says so, the caller draws more
    nc = V.vary(rng.random(V.uniforms_needed(n_off, tournament, flip, shift, ck.shape[1])),
                *args)
    if cur_k is not None:
        return nc, nf, nb, nt, nk
    return nc, nf, nb, nt


def test_crossover_swaps_one_contiguous_segment():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = np.zeros(12, np.uint8)
        b = np.ones(12, np.uint8)
        assert V._cross(rng.random(2), 0, a, b, 12) == 2
        assert (a + b == 1).all()
        seg = np.flatnonzero(a)
        assert 1 <= seg.size <= 11 and (np.diff(seg) == 1).all()


def test_shifts_stay_in_stage():
    rng = np.random.default_rng(0)
    S, L = 3, 5
    for _ in range(100):
        row = np.zeros(S * L, np.uint8)
        row[L - 1] = 1  # a cut at the last bit of stage 0
        V._mutate(rng.random(64), 0, row, S * L, L, S, 0.0, 1.0, 0.0, 0.0,
                  V._p0(S * (L - 1), 1.0))
        assert row[:L].sum() == 1 and row[L:].sum() == 0


@pytest.mark.parametrize("n,p", [(10, 0.1), (200, 0.005), (5, 0.6), (7, 1.0), (7, 0.0)])
def test_binomial_by_inversion(n, p):
    rng = np.random.default_rng(5)
    k = np.array([V._binomial(x, n, p, V._p0(n, p)) for x in rng.random(20000)])
    assert 0 <= k.min() and k.max() <= n
    assert k.mean() == pytest.approx(n * p, abs=0.05 * max(1.0, n * p))
    assert k.var() == pytest.approx(n * p * (1 - p), abs=0.08 * max(1.0, n * p))


def test_tournament_of_everyone_picks_the_best_and_unchanged_keep_their_time():
    rng = np.random.default_rng(1)
    P, L = 16, 9
    cur = (rng.random((P, L)) < 0.5).astype(np.uint8)
    times = rng.random(P) + 1.0
    times[5] = 0.5
    nc, nf, _, nt = _vary(cur, times, 10, tournament=200, cxpb=0.0, mutpb=0.0)
    assert nc == 0
    assert (nf[:10] == cur[5]).all() and (nt[:10] == 0.5).all()


def test_changed_offspring_come_first():
    rng = np.random.default_rng(2)
    P, L = 32, 20
    cur = (rng.random((P, L)) < 0.3).astype(np.uint8)
    times = rng.random(P)
    nc, nf, _, nt = _vary(cur, times, 30, cxpb=0.5, mutpb=0.3, seed=3)
    assert 0 < nc < 30
    assert np.isnan(nt[:nc]).all()  # to be evaluated
    assert not np.isnan(nt[nc:30]).any()  # unchanged: the parent's time
    for k in range(nc, 30):  # an unchanged offspring is a copy of a parent with that time
        match = np.flatnonzero((cur == nf[k]).all(axis=1))
        assert any(times[j] == nt[k] for j in match)


def test_elite_rows_are_distinct_and_best_first():
    pop = np.array([[1, 0], [1, 0], [0, 1], [0, 0]], np.uint8)
    times = np.array([1.0, 1.0, 2.0, 0.5])
    no_caps = np.zeros((len(pop), 0), np.int64)
    tie = V.cap_ties(no_caps, 2)
    assert V.elite_rows(pop, pop, no_caps, times, tie, 3, False).tolist() == [3, 0, 2]


def test_equal_times_rank_larger_caps_first():
    """The tie-break (cap_ties): among equal T the plan with the larger caps (each counted up
    to B) ranks first, in the elites and in a tournament; a lower T still wins whatever its
    caps."""
    B = 8
    caps = np.array([[1, 8], [8, 8], [8, 20], [1, 1]], np.int64)
    tie = V.cap_ties(caps, B)
    assert tie.tolist() == [-9, -16, -16, -2]
    times = np.array([1.0, 1.0, 1.0, 0.5])
    pop = np.arange(8, dtype=np.uint8).reshape(4, 2)  # all distinct
    order = V.elite_order(times, tie)
    assert order.tolist() == [3, 1, 2, 0]
    assert V.elite_rows(pop, pop, caps, times, tie, 4, False).tolist() == [3, 1, 2, 0]
    # the compiled order equals numpy's lexsort on random times with many ties
    rng = np.random.default_rng(1)
    for _ in range(50):
        t = rng.integers(0, 5, 40).astype(float)
        ti = rng.integers(-3, 0, 40)
        assert V.elite_order(t, ti).tolist() == np.lexsort((ti, t)).tolist()
    # tournaments of size 2 between rows 0 and 1 (equal T): row 1 always wins
    cur = np.zeros((2, 3), np.uint8)
    t2 = np.array([1.0, 1.0])
    k2 = caps[:2].copy()
    _, _, _, _, nk = _vary(cur, t2, 2, tournament=8, cxpb=0.0, mutpb=0.0, cur_k=k2, B=B)
    assert (nk == [8, 8]).all()


def test_no_plan_is_decoded_per_generation(monkeypatch):
    """Lean generations: the search never builds a Plan inside the loop (only the result)."""
    import umpipe_bench.planners.evaluation.encoding as enc

    calls = []
    real = enc.bits_to_plan
    monkeypatch.setattr(enc, "bits_to_plan", lambda *a: calls.append(1) or real(*a))
    import umpipe_bench.planners.evaluation.objective as obj

    monkeypatch.setattr(obj, "bits_to_plan", enc.bits_to_plan)
    res = TiDGAP(population=16).plan(synthetic_problem(4, 16, 0), budget="gens:30", seed=0)
    assert len(res.history) == 31
    assert len(calls) == 1


def test_cap_genes_follow_their_parents_and_stay_in_range():
    """Cap genes (docs/SCHEDULES.md): unchanged offspring keep their parent's caps; mating
    swaps one contiguous run of stages; every cap stays in 1..B."""
    rng = np.random.default_rng(3)
    P, S, B = 40, 5, 16
    cur_f = (rng.random((P, S * (B - 1))) < 0.3).astype(np.uint8)
    cur_k = rng.integers(1, B + 1, size=(P, S))
    times = rng.random(P)
    nc, nf, _, nt, nk = _vary(cur_f, times, P - 2, cur_k=cur_k, cap_rate=2.0, B=B,
                              stage_len=B - 1, cxpb=0.0, mutpb=0.0)
    assert nc == 0  # nothing changed: every offspring is a copy of its parent
    for k in range(P - 2):
        parents = [i for i in range(P) if (cur_f[i] == nf[k]).all() and times[i] == nt[k]]
        assert any((cur_k[i] == nk[k]).all() for i in parents)
    nc, nf, _, nt, nk = _vary(cur_f, times, P - 2, cur_k=cur_k, cap_rate=3.0, B=B,
                              stage_len=B - 1, cxpb=1.0, mutpb=1.0, seed=5)
    assert nc == P - 2 and nk[:nc].min() >= 1 and nk[:nc].max() <= B
    assert (nk[:nc] != cur_k[:nc]).any()


def test_cap_crossover_swaps_one_contiguous_run_of_stages():
    rng = np.random.default_rng(1)
    for _ in range(100):
        a = np.full(6, 2, np.int64)
        b = np.full(6, 9, np.int64)
        assert V._cross_caps(rng.random(2), 0, a, b) == 2
        assert (a + b == 11).all()
        run = np.flatnonzero(a == 9)
        assert run.size >= 1 and (np.diff(run) == 1).all()


def test_sync_copies_one_stage_between_the_chromosomes():
    """``sync_rate`` 1 with no other change: each offspring's forward and backward bits agree
    on exactly one stage (one chromosome took the other's partition there) and nothing else
    moved."""
    S, Ls, P = 5, 6, 40
    cur_f = np.zeros((P, S * Ls), np.uint8)
    cur_b = np.ones((P, S * Ls), np.uint8)
    nc, nf, nb, _ = _vary(cur_f, np.ones(P), P, cxpb=0.0, mutpb=1.0, flip=0.0, shift=0.0,
                          stage_len=Ls, cur_b=cur_b, sync=1.0, seed=4)
    assert nc == P
    to_b = to_f = 0
    for k in range(P):
        f, b = nf[k].reshape(S, Ls), nb[k].reshape(S, Ls)
        same = [s for s in range(S) if (f[s] == b[s]).all()]
        assert len(same) == 1
        s = same[0]
        rest = [t for t in range(S) if t != s]
        assert (f[rest] == 0).all() and (b[rest] == 1).all()
        to_b += int((b[s] == 0).all())
        to_f += int((f[s] == 1).all())
    assert to_b > 5 and to_f > 5  # both directions happen


def test_vary_reads_a_prefix_and_says_how_long():
    """``used`` is the number of uniforms a call read: the same call on exactly that prefix
    writes the same offspring (what lets the engine draw only a prefix)."""
    rng = np.random.default_rng(3)
    P, S, Ls = 40, 4, 7
    L = S * Ls
    cur_f = (rng.random((P, L)) < 0.4).astype(np.uint8)
    cur_b = (rng.random((P, L)) < 0.4).astype(np.uint8)
    cur_k = rng.integers(1, 9, (P, S))
    times = rng.random(P)
    u = rng.random(V.uniforms_needed(P - 2, 3, 1.0, 8.0, S))

    def run(buf):
        nf, nb, nk = np.zeros_like(cur_f), np.zeros_like(cur_b), np.zeros_like(cur_k)
        nt = np.full(P, np.nan)
        used = np.zeros(1, np.int64)
        nc = V.vary(buf, cur_f, cur_b, times, nf, nb, nt, P - 2, 3, 0.7, 0.6, 1.0, 8.0, 1.0,
                    Ls, True, cur_k, nk, 1.0, 8, V.cap_ties(cur_k, 8), 0.5, used)
        assert nc > 0
        return int(used[0]), nc, (nf, nb, nk, nt)

    n1, nc1, a1 = run(u)
    n2, nc2, a2 = run(u[:n1].copy())
    assert 0 < n1 < u.size and n2 == n1 and nc2 == nc1
    for x, y in zip(a1, a2):
        np.testing.assert_array_equal(x, y)


class _FullDraw(TiDGAPEngine):
    """The engine as it drew before prefix draws: all ``_nu`` uniforms every call."""

    def _vary_stream(self, args):
        nc = self._vary.vary(self.rng.random(self._nu), *args, self._used)
        while nc < 0:
            self._nu *= 2
            nc = self._vary.vary(self.rng.random(self._nu), *args, self._used)
        return int(nc)


class _ShortDraw(TiDGAPEngine):
    """Every prefix too short: each call completes its draw and varies again."""

    def _vary_stream(self, args):
        self._guess = 8
        return super()._vary_stream(args)


@pytest.mark.parametrize("mode,family", [("stash", True), ("recompute", True),
                                         ("recompute", False)])
def test_prefix_draws_keep_the_random_stream(mode, family):
    """Drawing a prefix and advancing the generator past the rest is the same stream as
    drawing everything: the same populations generation by generation, also when every
    prefix is too short."""
    from umpipe_bench.planners.evaluation.objective import CutBitsObjective, FamilyObjective

    pr = synthetic_problem(5, 12, 1)
    settings = dict(TiDGAP().config)
    runs = []
    for cls in (TiDGAPEngine, _FullDraw, _ShortDraw):
        obj = FamilyObjective(pr, mode) if family else CutBitsObjective(pr, mode)
        eng = cls(pr, mode, settings, 24, 7, obj)
        eng.initialize()
        trace = []
        for _ in range(60):
            eng.step()
            trace.append((eng.pop_f.copy(), eng.pop_b.copy(), eng.pop_k.copy(),
                          eng.times.copy()))
        runs.append((trace, eng.rng.random()))
    for other in runs[1:]:
        assert other[1] == runs[0][1]  # the generator ends at the same place
        for a1, a2 in zip(runs[0][0], other[0]):
            for x, y in zip(a1, a2):
                np.testing.assert_array_equal(x, y)

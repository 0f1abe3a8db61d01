"""One TiDGAP run: an array population evolved by compiled variation (:mod:`.tidgap`).

The population is two preallocated uint8 buffers ``[P, S*(B-1)]`` per chromosome (this
generation and the next, swapped), with cap genes ``[P, S]`` beside them on the schedule family;
one :func:`..search._variation.vary` call makes a whole generation and writes the changed
offspring first, so the objective reads one contiguous slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problem import Problem
from ..evaluation.objective import CutBitsObjective, FamilyObjective, Genomes, Objective
from ..search.caps import clamp_caps, memory_cap_limits, random_caps
from ..search.loop import Evaluate, SearchAlgorithm
from ..search.seeding import (
    Seeds,
    add_family_seeds,
    add_start_seed,
    initial_population,
    seed_plans,
)
from .descent import add_descent_seed, descent_allowance

__all__ = ["TiDGAPEngine"]


class TiDGAPEngine(SearchAlgorithm):
    """One TiDGAP run over array populations (ask/tell; :class:`..search.loop.SearchLoop`
    drives)."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | np.random.SeedSequence | None,
                 objective: Objective | None = None, evaluations: int | None = None) -> None:
        from ..search import _variation

        self._vary = _variation
        self.problem, self.mode, self.settings = problem, mode, settings
        self.S, self.B = problem.S, problem.B
        self.L = self.S * (self.B - 1)
        self.P = population
        #: One more seed plan (a :class:`~umpipe_bench.plan.Plan`, e.g. a coarse start,
        #: :mod:`..search.coarse`), evaluated with the family's seeds; None: none.
        self.start: Any = None
        self.elites = int(settings["elites"])
        self.rng = np.random.default_rng(seed)
        self.objective = objective or CutBitsObjective(
            problem, mode, settings.get("backend", "auto"), settings.get("device") or None)
        self.recompute = mode == "recompute"
        # the schedule family (docs/SCHEDULES.md): per-stage in-flight cap genes beside the
        # bits; [P, 0] arrays when the objective is the GPipe recurrence
        self.family = isinstance(self.objective, FamilyObjective)
        self.Sk = self.S if self.family else 0
        self._k = [np.full((self.P, self.Sk), self.B, np.int64) for _ in range(2)]
        self.cap_limits = memory_cap_limits(problem, mode) if self.family else None
        shape = (self.P, self.L)
        self._f = [np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)]
        self._b = ([np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)]
                   if self.recompute else self._f)
        self._t = [np.full(self.P, np.inf), np.full(self.P, np.inf)]
        # the tie-break between equal T (lower wins: larger caps, _variation.cap_ties)
        self._tie = [np.zeros(self.P, np.int64), np.zeros(self.P, np.int64)]
        self.cur = 0
        self.elite_idx = np.zeros(0, np.int64)
        self.seed_labels: list[str] = []
        self.generation = 0
        self.stale = 0  # generations without a better best (the islands' revival reads it)
        self.budget_evaluations = evaluations  # the stage descent's allowance is a share
        self.used = 0  # evaluations this engine asked for (setup and generations)
        self._nc = 0
        s = settings
        # the variation call's settings, parsed once: (tournament, cxpb, mutpb, flip_rate,
        # shift_rate, copy_rate) and (cap_rate, B)
        rates = (int(s["tournament"]), float(s["cxpb"]), float(s["mutpb"]),
                 float(s["flip_rate"]), float(s["shift_rate"]), float(s.get("copy_rate", 0.0)))
        self._rates = (rates, (float(s.get("cap_rate", 0.0)), self.B))
        self._nu = self._vary.uniforms_needed(self.P, rates[0], rates[3], rates[4], self.Sk)
        self._sync = float(s.get("sync_rate", 0.0))
        self._used = np.zeros(1, np.int64)  # uniforms the last vary call read
        self._guess = self._nu  # how many to draw for the next call (_vary_stream)
        self.best_time = float("inf")
        self.start_time = float("inf")
        # the seed plans: given (a later round of :class:`RestartEngine`: evaluated once, in
        # the first round) or made in setup()
        self.preset_seeds: Seeds | None = None
        self.seeds: Seeds | None = None

    # ---------------------------------------------------------------- views
    @property
    def pop_f(self) -> np.ndarray:
        return self._f[self.cur]

    @property
    def pop_b(self) -> np.ndarray:
        return self._b[self.cur]

    @property
    def times(self) -> np.ndarray:
        return self._t[self.cur]

    @property
    def pop_k(self) -> np.ndarray:
        return self._k[self.cur]

    @property
    def tie(self) -> np.ndarray:
        return self._tie[self.cur]

    def _genomes(self, f: np.ndarray, b: np.ndarray, k: np.ndarray | None = None) -> Genomes:
        shape = (f.shape[0], self.S, self.B - 1)
        gf = f.reshape(shape)
        return Genomes(gf, b.reshape(shape) if self.recompute else gf,
                       k if self.family else None)

    def _bits_eval(self, evaluate: Evaluate) -> Any:
        def run(fb: np.ndarray, bb: np.ndarray, edp: range | None = None) -> np.ndarray:
            return evaluate(Genomes(fb, bb if self.recompute else fb, edp=edp))
        return run

    # ---------------------------------------------------------------- ask/tell hooks
    def setup(self, evaluate: Evaluate) -> None:
        seeds = self.preset_seeds if self.preset_seeds is not None else self.make_seeds(evaluate)
        self.seeds = seeds
        self.populate(seeds, evaluate)

    def _counting(self, evaluate: Evaluate) -> Evaluate:
        def counted(g: Genomes) -> np.ndarray:
            self.used += len(g)
            return evaluate(g)
        return counted

    def make_seeds(self, evaluate: Evaluate) -> Seeds:
        """The seed plans (EDP scans, greedy plans, the family's 1F1B-EDP plans and the stage
        descent from the best of them), evaluated, best first."""
        from ..evaluation.clock import current
        from ..evaluation.reference import edp_scan

        s = self.settings
        clock = current()
        evaluate = self._counting(evaluate)
        if self.family:
            # the EDP references first: the GPipe one is the seeding's EDP scan (the same
            # evaluations, counted there), the 1F1B one what the result is never worse than
            # (final_plan); both on the run's clock, cached for the report
            edp_scan(self.problem, self.mode, "gpipe")
            edp_scan(self.problem, self.mode, "1f1b")
        seeds = seed_plans(self.problem, self.mode, self._bits_eval(evaluate),
                           int(s["edp_seeds"]), bool(s["greedy_seeds"]), edp_ranges=True)
        if self.family:
            seeds = add_family_seeds(self.problem, self.mode, seeds, evaluate)
            if self.start is not None:
                seeds = add_start_seed(self.problem, seeds, self.start, "coarse", evaluate)
        allowance = descent_allowance(self.problem, self.mode, s, self.budget_evaluations)
        if allowance != 0 and len(seeds.labels):
            clock.phase = "the stage descent"
            seeds = add_descent_seed(seeds, evaluate, self.mode, allowance, self.cap_limits,
                                     clock.seconds)
        return seeds

    def populate(self, seeds: Seeds, evaluate: Evaluate) -> None:
        """The initial population: the best seeds, then random individuals (evaluated)."""
        from ..evaluation.clock import current

        clock = current()
        phase, clock.phase = clock.phase, "the initial population"
        evaluate = self._counting(evaluate)
        fb, bb, n_seed = initial_population(self.problem, self.mode, self.P, self.rng, seeds)
        clock.tick()
        self.seed_labels = seeds.labels[:n_seed]
        self.pop_f[:] = fb.reshape(self.P, self.L)
        if self.recompute:
            self.pop_b[:] = bb.reshape(self.P, self.L)
        clock.tick()
        if self.family:
            k = self.pop_k
            k[:n_seed] = seeds.caps[:n_seed]
            k[n_seed:] = random_caps(self.rng, self.P - n_seed, self.S, self.B)
            clamp_caps(k[n_seed:], self.cap_limits)
        self.tie[:] = self._vary.cap_ties(self.pop_k, self.B)
        t = self.times
        t[:n_seed] = seeds.times[:n_seed]
        t[n_seed:] = evaluate(self._genomes(self.pop_f[n_seed:], self.pop_b[n_seed:],
                                            self.pop_k[n_seed:]))
        self.start_time = float(t.min())
        self._update_elites()
        clock.phase = phase  # a later restart round populates mid-search

    def _update_elites(self) -> None:
        """The best ``elites`` distinct individuals (a hall of fame: with elitism the
        population always holds the best ever found); equal T: larger caps first."""
        self.elite_idx = self._vary.elite_rows(self.pop_f, self.pop_b, self.pop_k, self.times,
                                               self.tie, self.elites, self.recompute)
        best = float(self.times[self.elite_idx[0]])
        if best < self.best_time:
            self.best_time = best
            self.stale = 0
        else:
            self.stale += 1

    def ask_size(self) -> int:
        return self.P - self.elites

    def ask(self) -> Genomes:
        nxt = 1 - self.cur
        n_off = self.P - self.elites
        nf, nb, nt, nk = self._f[nxt], self._b[nxt], self._t[nxt], self._k[nxt]
        rates, caps = self._rates
        args = (self.pop_f, self.pop_b, self.times, nf, nb, nt, n_off, *rates, self.B - 1,
                self.recompute, self.pop_k, nk, *caps, self.tie, self._sync)
        nc = self._vary_stream(args)
        self._nc = int(nc)
        if self.family:
            clamp_caps(nk[:self._nc], self.cap_limits)
        el = self.elite_idx
        nf[n_off:n_off + el.size] = self.pop_f[el]
        if self.recompute:
            nb[n_off:n_off + el.size] = self.pop_b[el]
        nk[n_off:n_off + el.size] = self.pop_k[el]
        nt[n_off:n_off + el.size] = self.times[el]
        if self.family:  # without cap genes every tie is 0
            self._tie[nxt][:] = self._vary.cap_ties(nk, self.B)
        return self._genomes(nf[:self._nc], nb[:self._nc], nk[:self._nc])

    def _vary_stream(self, args: tuple[Any, ...]) -> int:
        """One :func:`..search._variation.vary` call on ``self._nu`` uniforms of the run's stream.

        A call reads a prefix of its uniforms, typically 40 % of the generous ``self._nu``,
        and drawing them is a tenth of a generation where evaluation is cheap. So only a
        prefix is drawn (a quarter more than the last call read), and the generator is then
        advanced past the rest (``bit_generator.advance``: one 64-bit output per double):
        the stream, and so every result, is the same as drawing all ``self._nu``. A prefix
        too short is completed to ``self._nu`` and the call repeated; when even those run
        out (rare), twice as many fresh ones are drawn, as before.
        """
        vary, rng, used = self._vary.vary, self.rng, self._used
        m = min(self._nu, self._guess)
        u = rng.random(m)
        nc = vary(u, *args, used)
        if nc >= 0:
            if m < self._nu:
                rng.bit_generator.advance(self._nu - m)
        elif m < self._nu:
            nc = vary(np.concatenate([u, rng.random(self._nu - m)]), *args, used)
        while nc < 0:  # ran out of uniforms (rare): draw twice as many and vary again
            self._nu *= 2
            nc = vary(rng.random(self._nu), *args, used)
        self._guess = int(used[0]) + int(used[0]) // 4 + 64
        return int(nc)

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        nxt = 1 - self.cur
        self.generation += 1
        self.used += int(times.size)
        self._t[nxt][:self._nc] = times
        self.cur = nxt
        self._update_elites()

    def best(self) -> tuple[Genomes, float]:
        i = int(self.elite_idx[0])
        return (self._genomes(self.pop_f[i:i + 1], self.pop_b[i:i + 1], self.pop_k[i:i + 1]),
                float(self.times[i]))


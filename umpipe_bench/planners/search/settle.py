"""Rounds until settled: restart rounds of a fixed size that end when they stop paying.

The stop rule of TiDGAP's default budget (docs/SEARCH.md, "Stopping"). Rounds are those of
:class:`.restarts.RestartEngine` (each a fresh run from its own random stream, spawned from
the seed; the seed plans evaluated once, in the first round), but each gets a set number of
evaluations (``round_evaluations``, doubled every ``double_every`` rounds, at most
``max_doublings`` times: short rounds first, deeper ones while the rule goes on), and there is
no set number of rounds: after each round a plan is polished (a callable, e.g.
:func:`..algorithms.iterated.iterated_descent`, with a random stream of its own per round):
the best plan so far (this round's or an earlier one's), or with ``polish_own`` after a search
round that round's own best (each search round then ends in a basin of its own, not in a
plan next to the best one), and the run
ends once ``patience`` rounds in a row have improved the best plan so far by less than
``tolerance`` (relative), after at least ``min_rounds`` rounds, or after ``max_rounds``.
With ``ga_rounds``, only the first ``ga_rounds`` rounds always run the search itself; a later
round runs it when the last search round's own best (with ``polish_own``: polished) beat the
best plan before it, or when the
last round of the polish alone improved nothing, and is otherwise the polish alone (of the
best plan so far, with the round's own random stream): while fresh runs find nothing better,
their time goes to the polish, and once the polish stalls too, fresh runs get their turn again
(a run whose first rounds landed in a poor basin can still leave it).

Every decision reads only evaluation counts and T, so the rule is deterministic given the
seed: the same seed gives the same rounds and the same plan. The budget's evaluations and
seconds stay caps above it (the seconds through the run's clock, the one thing that depends
on the machine).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..evaluation.clock import current as current_clock
from ..evaluation.objective import Genomes
from .base import Budget
from .loop import Evaluate
from .restarts import RestartEngine, Round

__all__ = ["Polish", "SettlingRestarts"]

#: ``polish(evaluate, genome, T, allowance, rng) -> (genome, T, evaluations)``.
Polish = Callable[[Evaluate, Genomes, float, int, np.random.Generator],
                  tuple[Genomes, float, int]]


class SettlingRestarts(RestartEngine):
    """Rounds of ``round_evaluations`` each until the stop rule holds (module docstring).

    ``polish_share``: the most of a round's evaluations its polish may spend (times the
    round's). ``polish_best``: polish the best plan so far (False: the round's own best; for a
    deterministic polish, which gains nothing on a plan it has polished already).
    ``polish_own``: with ``polish_best``, a search round's polish starts from the round's own
    best (the rounds of the polish alone still from the best plan so far).
    ``ga_rounds``: see the module docstring (None: every round runs the search)."""

    #: A polish spends as much as a round inside one ``tell``: the loop's history notes its
    #: improvements as they come.
    records_improvements = True

    def __init__(self, build: Callable[[Budget, np.random.SeedSequence], Round],
                 budget: Budget, seed: int | None, *, round_evaluations: int,
                 max_rounds: int, min_rounds: int, patience: int, tolerance: float,
                 polish: Polish | None = None, polish_share: float = 0.25,
                 polish_best: bool = True,
                 double_every: int = 0, max_doublings: int = 0,
                 ga_rounds: int | None = None, polish_own: bool = False,
                 agree: float | None = None) -> None:
        super().__init__(build, budget, max_rounds, seed)
        self.round_evaluations = int(round_evaluations)
        self.double_every, self.max_doublings = double_every, max_doublings
        self.min_rounds, self.patience, self.tolerance = min_rounds, patience, tolerance
        self.polish_fn, self.polish_share, self.polish_best = polish, polish_share, polish_best
        # the polishes' random streams: children of the seed after the rounds' ones
        self.polish_streams = np.random.SeedSequence(seed).spawn(2 * max_rounds)[max_rounds:]
        self.polished: list[tuple[Genomes, float]] = []
        self.polish_used = 0
        #: The best T after each round (polish included): what the rule reads.
        self.round_best: list[float] = []
        self.ga_rounds = ga_rounds
        self.polish_own, self.agree = polish_own, agree
        #: The last search round's polished plan's T (with ``polish_own``): what ``agree`` reads.
        self.search_polished = float("inf")
        self._round_prior = float("inf")  # the best T when the running search round began
        self._search_paid = True  # the last search round's own best beat the best before it
        self._polish_paid = True  # the last round of the polish alone improved the best

    def _start_round(self, evaluate: Evaluate) -> None:
        self._round_prior = self.best_time
        super()._start_round(evaluate)

    def _next_searches(self) -> bool:
        """Whether the next round runs the search (else it is the polish alone)."""
        if self.ga_rounds is None or self.polish_fn is None:
            return True
        return (len(self.round_best) < self.ga_rounds or self._search_paid
                or not self._polish_paid)

    def round_size(self, r: int) -> int:
        """Round ``r``'s evaluations: ``round_evaluations``, doubled every ``double_every``
        rounds (0: never), at most ``max_doublings`` times."""
        d = min(self.max_doublings, r // self.double_every) if self.double_every else 0
        return self.round_evaluations << d

    def _share(self, r: int) -> Budget:
        """Round ``r``'s :meth:`round_size` (a new round starts only when it fits)."""
        return Budget(evaluations=self.round_size(r))

    @property
    def used(self) -> int:
        return super().used + self.polish_used

    @property
    def best_time(self) -> float:  # type: ignore[override]
        return min([super().best_time, *(t for _, t in self.polished)])

    def settled(self) -> bool:
        """The stop rule on the rounds so far."""
        n, P = len(self.round_best), self.patience
        if n >= self.rounds:
            return True
        if n < max(self.min_rounds, P + 1):
            return False
        ref = self.round_best[n - P - 1]
        if self.round_best[-1] < ref * (1.0 - self.tolerance):
            return False
        # the rounds agree: the last search round, polished on its own, ended near the best
        return (self.agree is None or not self.polish_own
                or self.search_polished <= self.best_time * (1.0 + self.agree))

    def _end_round(self, searched: bool = False) -> None:
        """Polish the best plan so far, note the best so far. After a search round with
        ``polish_own``: first the round's own best (its polished T becomes
        :attr:`search_polished`), then, with what is left of the allowance, the best plan so
        far when the first polish did not beat it."""
        assert self._evaluate is not None
        own = not self.polish_best or (searched and self.polish_own)
        genome, T = self.current.best() if own else self.best()
        if self.polish_fn is not None and np.isfinite(T):
            r = len(self.round_best)
            room = int(self.polish_share * self.round_size(r))
            if self.budget.evaluations is not None:
                room = min(room, self.budget.evaluations - self.used)
            rng = np.random.default_rng(self.polish_streams[r])
            T, used = self._polish(genome, T, room, rng)
            if own and self.polish_best and T > self.best_time and room > used:
                self._polish(*self.best(), room - used, rng)
        if searched and own:
            self.search_polished = T
        self.round_best.append(self.best_time)

    def _polish(self, genome: Genomes, T: float, room: int, rng: np.random.Generator
                ) -> tuple[float, int]:
        """One call of the polish: note its plan when faster; (its T or ``T``, the
        evaluations it spent)."""
        assert self._evaluate is not None and self.polish_fn is not None
        clock = current_clock()
        phase, clock.phase = clock.phase, "the iterated descent"
        g, t, used = self.polish_fn(self._evaluate, genome, T, room, rng)
        clock.phase = phase  # not on a signal or the deadline: the stop note names it
        self.polish_used += used
        if t < T:
            self.polished.append((g, t))
        return min(T, t), used

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        self.current.tell(genomes, times)
        self.generation += 1
        if not self._round_over():
            return
        raw = self.current.best()[1] < self._round_prior
        self._end_round(searched=True)
        # polish_own: the round paid when its polished best beat the best before it
        self._search_paid = self.best_time < self._round_prior if self.polish_own else raw
        cap = self.budget.evaluations
        while not self.settled():
            room = self.round_size(len(self.round_best))
            if self._next_searches():
                if cap is not None and cap - self.used < room:
                    break  # the cap leaves no room for a whole round
                assert self._evaluate is not None
                self._start_round(self._evaluate)
                return
            if cap is not None and cap <= self.used:
                break
            before = self.best_time
            self._end_round()  # a round of the polish alone (its clock ends it on time)
            self._polish_paid = self.best_time < before
        self.finished = True

    def best(self) -> tuple[Genomes, float]:
        """The best round's best or polished plan (the first of equal ones)."""
        out = [e.best() for e in self.engines] + self.polished
        return min(out, key=lambda gt: gt[1])

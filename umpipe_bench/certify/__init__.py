"""Certified plans: exact optima and proven bounds from a constraint solver (docs/CERTIFY.md).

* :mod:`.model`: the CP-SAT model of plan selection (partitions and op order) on integer
  costs rounded down;
* :mod:`.solve`: one time-limited, interruptible solve, the returned plan re-simulated by the
  reference simulator, and the certificate (proven bound, best value, optimal or not);
* :mod:`.relax`: the per-stage relaxation that strengthens :func:`umpipe_bench.bound.lower_bound`.

The solver (OR-Tools CP-SAT) is the optional extra ``certify``; it is imported only inside
:func:`.solve.certify`, which raises :class:`.solve.SolverMissing` without it.

This package imports no torch.
"""

"""Evaluation: the cut-bit genome encoding (docs/MODEL.md §2) and everything that computes the
iteration time ``T`` of a population of genomes or plans fast (docs/MODEL.md §4): the gpipe
recurrence's evaluators and compiled kernels, the capped family's evaluator, the objectives a
search optimizes and the best-EDP reference scan.

Nothing here imports :mod:`..search` or :mod:`..algorithms` (tests/test_imports.py)."""

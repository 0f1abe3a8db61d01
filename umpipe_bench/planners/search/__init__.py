"""Search: the planner interface (:mod:`.base`), the one ask/tell loop and its typed history,
settings, the seeded initial population, cap genes, the GA's variation operators and restart
rounds.

It imports from :mod:`..evaluation`; from :mod:`..algorithms` only the greedy plans that seed
every GA (:mod:`.seeding`; tests/test_imports.py)."""

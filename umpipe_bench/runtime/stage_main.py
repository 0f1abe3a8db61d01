"""``python -m umpipe_bench.runtime.stage_main --spec run.json``: the launcher's entry point of
one stage process (docs/ARCHITECTURE.md, "Processes").

It asks for the parent-death signal before importing torch (seconds), so a ``torchrun`` killed
at any moment takes its stage processes with it; then it runs
:func:`umpipe_bench.runtime.worker.main`.
"""

from __future__ import annotations

import sys

from .lifetime import die_with_parent

if __name__ == "__main__":
    die_with_parent()
    from .worker import main

    sys.exit(main())

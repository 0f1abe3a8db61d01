"""``python -m umpipe_bench.runtime.stage_main --spec run.json``: the launcher's entry point of
one stage process (docs/ARCHITECTURE.md, "Processes").

``--torch-multi`` first runs :func:`umpipe_bench.runtime.torch_multi.main` instead (every
torch.distributed.pipelining schedule, several chunks per rank), ``--chunks``
:func:`umpipe_bench.runtime.chunk_worker.main` (chunk plans, one process per device).

It asks for the parent-death signal before importing torch (seconds), so a ``torchrun`` killed
at any moment takes its stage processes with it; then it runs
:func:`umpipe_bench.runtime.worker.main`.
"""

from __future__ import annotations

import sys

from .lifetime import die_with_parent

if __name__ == "__main__":
    die_with_parent()
    if sys.argv[1:2] == ["--torch-multi"]:  # a torch-schedules run (runtime/torch_multi.py)
        from .torch_multi import main as multi_main

        sys.exit(multi_main(sys.argv[2:]))
    if sys.argv[1:2] == ["--chunks"]:  # chunk plans, one process per device (chunk_worker.py)
        from .chunk_worker import main as chunk_main

        sys.exit(chunk_main(sys.argv[2:]))
    from .worker import main

    sys.exit(main())

"""Keep the garbage collector off the objects a run makes once and holds to its end.

A run imports its libraries and loads its world (labels, token ids, features) once and keeps
them. Python's collector walks every tracked object at each full collection: during the imports,
in each fork over the inherited heap, and once more while the interpreter exits, seconds of one
core on the default run (`benchmarks/gc_cost_bench.py` counts them).
`hold` pauses automatic collection while a run starts up (imports make objects, hardly any
garbage); `settle` moves every object alive now into the collector's permanent generation
(`gc.freeze`) and resumes collection, so later collections look only at what comes after.
Nothing is freed early: reference counting still frees each object when its last user lets
go. What the collector alone would free waits for the process to end: garbage cycles made before
a `settle`, and settled objects that later die in a cycle. A process that runs several jobs in
turn (a Hydra sweep's basic launcher) calls `release` after each, so the next job's collections
see what the last one left.
"""

from __future__ import annotations

import gc


def hold() -> None:
    """Pause automatic full collections until the next `settle` (for a run's start-up)."""
    gc.disable()


def settle() -> None:
    """Exempt every object alive now from later collections and resume collecting (once a
    stage's data is loaded for the rest of the run, before forking, and before exiting)."""
    gc.freeze()
    gc.enable()


def release() -> None:
    """Hand every settled object back to the collector (after one job of several in a process)."""
    gc.unfreeze()

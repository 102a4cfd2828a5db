"""Keep the garbage collector off the objects a run makes once and holds to its end.

A run imports its libraries and loads its world (labels, token ids, features) once and keeps
them. Python's collector walks every tracked object at each full collection: on the default
run, imports alone triggered six full collections, the forks walked the inherited heap again,
and the interpreter walked it once more at exit, more than three seconds of one core in all.
`hold` pauses automatic collection while a run starts up (imports make objects, hardly any
garbage); `settle` moves every object alive now into the collector's permanent generation
(`gc.freeze`) and resumes collection, so later collections look only at what comes after.
Nothing is freed early: reference counting still frees each object when its last user lets
go; only garbage cycles made before a `settle` wait for the process to end.
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

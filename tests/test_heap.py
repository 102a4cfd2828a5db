"""A run holds the collector off during start-up and settles what it keeps: objects alive at a
`settle` are no longer walked by later collections, and collection runs again after it."""

from __future__ import annotations

import gc

from lenbench.runtime.heap import hold, release, settle


def test_hold_pauses_and_settle_freezes_and_resumes():
    was_enabled = gc.isenabled()
    try:
        hold()
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]  # tracked containers alive at the settle
        before = gc.get_freeze_count()
        settle()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + len(kept)
        assert not any(o is kept[0] for o in gc.get_objects())  # out of the collector's walk
    finally:
        gc.unfreeze()
        gc.enable() if was_enabled else gc.disable()


def test_release_hands_settled_objects_back_to_the_collector():
    was_enabled = gc.isenabled()
    try:
        kept = [[i] for i in range(100)]
        settle()
        assert gc.get_freeze_count() >= len(kept)
        release()
        assert gc.get_freeze_count() == 0
        assert any(o is kept[0] for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.enable() if was_enabled else gc.disable()

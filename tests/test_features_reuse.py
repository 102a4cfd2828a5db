"""A run that needs fewer features than a cached stage of the same world holds reads that stage
instead of redoing the teacher-forced pass; one that needs more, or other settings, does not."""

from __future__ import annotations

import json

from lenbench.features.reuse import covering_stage, covers
from lenbench.stages import Stage

BASE = {"roles": ["low", "mid"], "poolings": ["last"], "step_roles": ["mid"], "step_stride": 1,
        "batch_tokens": 8192, "step_poolings": ["last"]}
SUITE = {**BASE, "roles": ["low", "mid", "last"], "step_roles": ["mid", "last"],
         "step_poolings": ["last", "entropy"]}


def _built(cache, config: dict, parent: str = "gen1") -> Stage:
    stage = Stage(cache, "features", config, parent=parent)
    with stage.building() as tmp:
        (tmp / "meta.json").write_text("{}")
    return stage


def test_lists_must_be_supersets_and_other_settings_equal():
    assert covers(SUITE, BASE) and covers(BASE, BASE)
    assert not covers(BASE, SUITE)
    assert not covers({**SUITE, "step_stride": 4}, BASE)


def test_the_smallest_covering_stage_of_the_same_labels_is_reused(tmp_path):
    suite = _built(tmp_path, SUITE)
    bigger = _built(tmp_path, {**SUITE, "poolings": ["last", "mean"]})
    _built(tmp_path, {**SUITE, "roles": ["low", "mid", "high", "last"]}, parent="other labels")
    found = covering_stage(tmp_path, BASE, "gen1")
    assert found is not None and found.path == suite.path != bigger.path
    assert covering_stage(tmp_path, {**BASE, "roles": ["high"]}, "gen1") is None
    assert covering_stage(tmp_path, BASE, "gen2") is None


def test_an_unfinished_or_hand_made_folder_is_not_reused(tmp_path):
    partial = Stage(tmp_path, "features", SUITE, parent="gen1")
    partial.partial.mkdir(parents=True)  # a killed build
    assert covering_stage(tmp_path, BASE, "gen1") is None
    forged = tmp_path / "features" / "deadbeef0000"
    forged.mkdir()
    (forged / "stage.json").write_text(json.dumps({"parent": "gen1", "config": SUITE}))
    assert covering_stage(tmp_path, BASE, "gen1") is None  # its name is not its record's key

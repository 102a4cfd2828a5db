"""Your own prompts as the transfer set, on every experiment preset (README: `dataset@transfer=
jsonl transfer.path=mine.jsonl`), including the presets that bring a transfer set of their own:
a preset's transfer set is a dataset config of its own, so swapping the group swaps all of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lenbench.worldbuilding.cap_curve import CONF, compose

PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", PRESETS)
def test_a_jsonl_transfer_set_replaces_whatever_the_preset_brings(experiment, tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"prompt": "Explain TCP slow start."}\n', encoding="utf-8")
    run = compose(experiment, ["dataset@transfer=jsonl", f"transfer.path={mine}"])
    assert run.transfer is not None
    assert run.transfer.source == "jsonl" and Path(run.transfer.path) == mine
    assert not hasattr(run.transfer, "turns")  # no key of a ShareGPT transfer set is left


def test_the_smollm2_preset_still_brings_its_longer_prompts():
    run = compose("real_smollm2")
    assert (run.transfer.min_words, run.transfer.max_words, run.transfer.limit) == (61, 120, 400)
    assert run.transfer.turns == "first" and run.dataset.max_words == 60


def test_a_smaller_world_says_in_one_line_how_to_drop_its_transfer_set():
    from lenbench.transfer import transfer_size_note

    note = transfer_size_note(compose("real_smollm2", ["dataset.limit=24"]))
    assert note is not None and "transfer=null" in note and "transfer.limit=N" in note
    assert "400" in note and "dataset.limit=24" in note
    assert transfer_size_note(compose("real_smollm2")) is None  # 2,250 prompts, 400 transfer
    assert transfer_size_note(compose("real_smollm2", ["dataset.limit=24", "transfer.limit=10"])
                              ) is None
    assert transfer_size_note(compose("real_smollm2", ["dataset.limit=24", "transfer=null"])
                              ) is None
    own = compose("real_smollm2", ["dataset.limit=24", "dataset@transfer=jsonl",
                                   "transfer.path=mine.jsonl"])
    assert transfer_size_note(own) is None  # your own file: the set you asked for

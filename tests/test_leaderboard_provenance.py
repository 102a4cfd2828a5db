"""The labels' provenance under a world's heading counts every sample its card says was made:
a dense subset's extra samples included, and the repetition penalty named where it acted."""

from __future__ import annotations

from helpers.leaderboard import board_text

from lenbench.generation.label_counts import label_counts
from lenbench.leaderboard.provenance import _penalty_text

SAMPLING = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 768}


def test_a_dense_subset_counts_its_own_samples():
    gen = {"sampling": SAMPLING, "n_prompts": 2250, "n_prompts_too_long": 15, "n_samples": 2,
           "dense_prompts": 200, "dense_n_samples": 8, "n_censored": 1286}
    assert label_counts(gen) == (2235, 2, 2035 * 2 + 200 * 8, 1286)  # 5,670 samples


def test_labels_without_a_dense_subset_read_as_before():
    gen = {"sampling": SAMPLING, "n_prompts": 1008, "n_samples": 2, "n_censored": 905}
    assert label_counts(gen) == (1008, 2, 2016, 905)
    assert label_counts({**gen, "dense_prompts": 200, "dense_n_samples": None}) == \
        (1008, 2, 2016, 905)


def test_the_penalty_is_named_only_where_it_acts():
    assert _penalty_text({**SAMPLING, "repetition_penalty": 1.1}) == ", repetition penalty 1.1"
    assert _penalty_text(SAMPLING) == "" == _penalty_text({**SAMPLING, "repetition_penalty": 1.0})



def test_two_builds_of_one_world_name_their_shipped_version(tmp_path):
    """World v1 and v2 of SmolLM2 share a folder; each section names the shipped world it read."""
    import shutil

    from helpers.cli import REPO

    from lenbench.leaderboard import build_leaderboard

    folder = "sharegpt_wheel/smollm2-135m-instruct/constant"
    for labels in ("589166bd", "1a338e34"):
        source = next((REPO / "leaderboard" / "results" / folder).glob(f"*-{labels}.json"))
        (tmp_path / "results" / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(source, tmp_path / "results" / folder / source.name)
    text = board_text(build_leaderboard(tmp_path / "results", tmp_path / "lb"))
    v2, v1 = (text.split(f"\n## {name} / smollm2-135m-instruct (temperature 0.7, cap {cap})")[1]
              for name, cap in (("smollm2_sharegpt v2", 768), ("smollm2_sharegpt", 384)))
    assert "shipped world `smollm2_sharegpt@2`" in v2.split("\n## ")[0]
    assert "shipped world `smollm2_sharegpt`." in v1.split("\n## ")[0]


def test_a_greedy_build_is_named_greedy_and_the_hash_moves_to_its_details(tmp_path):
    import json
    import shutil

    from helpers.cli import REPO

    from lenbench.leaderboard import build_leaderboard

    folder = "sharegpt_wheel/smollm2-135m-instruct/constant"
    source = next((REPO / "leaderboard" / "results" / folder).glob("*-1a338e34.json"))
    (tmp_path / "results" / folder).mkdir(parents=True)
    shutil.copy(source, tmp_path / "results" / folder / source.name)
    greedy = json.loads(source.read_text())
    greedy["config"]["generation"]["shipped"] = "smollm2_sharegpt_greedy"
    greedy["generation"]["sampling"]["temperature"] = 0.0
    greedy["fingerprints"]["labels"] = "f071ffcbf2cd2d21"
    (tmp_path / "results" / folder / "greedy.json").write_text(json.dumps(greedy))
    text = board_text(build_leaderboard(tmp_path / "results", tmp_path / "lb", site=False))
    heading = "\n## smollm2_sharegpt_greedy / smollm2-135m-instruct (greedy, cap 768)\n"
    assert heading in text
    section = text.split(heading)[1].split("\n## ")[0]
    assert "labels `f071ffcb`" in section  # the hash stays in the section's details

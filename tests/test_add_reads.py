"""`python -m lenbench.results.add_reads`: what a stored result's predictor reads, from the
predictor its stored class and arguments build."""

from __future__ import annotations

from lenbench.results.add_reads import with_reads


def _result(target: str, **params) -> dict:
    return {"kind": "predictor", "predictor": {"name": "x", "target": target, "params": params}}


def test_reads_come_from_the_needs_of_the_predictor_as_stored():
    probe = with_reads(_result("baselines.mlp_probe.MLPProbe", layer="mid", dynamic=True))
    assert probe["predictor"]["reads"] == {"text": False, "target_states": True,
                                           "target_model": False}
    text = with_reads(_result("baselines.tfidf_ridge.TfidfRidgePredictor"))
    assert text["predictor"]["reads"]["text"] and not text["predictor"]["reads"]["target_states"]
    wrapped = with_reads(_result("baselines.conformal.ConformalPredictor",
                                 base={"_target_": "baselines.mlp_probe.MLPProbe",
                                       "name": "mlp_probe"}))
    assert wrapped["predictor"]["reads"]["target_states"]  # a wrapped config stays a config


def test_nothing_is_added_twice_or_to_what_cannot_be_built():
    done = _result("baselines.mlp_probe.MLPProbe")
    done["predictor"]["reads"] = {"text": True}
    assert with_reads(done) is None
    assert with_reads(_result("baselines.gone.Missing")) is None
    assert with_reads({"kind": "reference", "predictor": {"name": "noise_floor"}}) is None

"""End to end: the default suite on a reduced toy world, its results, leaderboard and caching.

The session fixture `e2e` (conftest.py) runs the `lenbench` console script once with no predictor
override on the reduced config. These tests read what it wrote, recompute what can be recomputed
from the cached labels, and check that later runs reuse the cached stages.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.cli import E2E_UPSTREAM, REPO, E2ERun, lenbench_cmd, run_lenbench
from helpers.leaderboard import board_text

from lenbench.results import validate_result
from lenbench.scoring.noise_floor import noise_floor_predictions

SUITE = ("constant", "prompt_length", "mlp_probe", "bin_classifier")


def _results(results_dir: Path) -> dict[str, list[dict]]:
    """Result files by predictor name (validated on the way)."""
    out: dict[str, list[dict]] = {}
    for path in sorted(results_dir.rglob("*.json")):
        data = validate_result(json.loads(path.read_text()), source=str(path))
        data["_path"] = path
        out.setdefault(data["predictor"]["name"], []).append(data)
    return out


def _stage(cache: Path, name: str, key: str) -> Path:
    path = cache / name / key
    assert (path / "stage.json").exists(), f"stage {name}/{key} is not complete"
    return path


@pytest.fixture(scope="module")
def results(e2e: E2ERun) -> dict[str, list[dict]]:
    return _results(e2e.results_dir)


@pytest.fixture(scope="module")
def labels(e2e: E2ERun, results) -> pd.DataFrame:
    key = results["constant"][0]["stage_keys"]["generate"]
    return pd.read_parquet(_stage(e2e.cache_dir, "generate", key) / "labels.parquet")


def test_default_suite_writes_one_valid_result_each(results):
    assert sorted(results) == sorted([*SUITE, "noise_floor"])
    for name, runs in results.items():
        assert len(runs) == 1, name
        r = runs[0]
        assert r["status"] == "ok" and r["error"] is None
        assert r["dataset"]["name"] == "toyworld" and r["model"]["name"] == "toy_tiny"
        assert r["seed"] == 0
        assert r["kind"] == ("reference" if name == "noise_floor" else "predictor")
        # deterministic path: dataset/model/predictor/<config hash>-<labels fingerprint>.json
        fingerprint = r["fingerprints"]["labels"]
        assert len(fingerprint) == 16 and r["fingerprints"]["features"]
        assert r["_path"].parts[-4:] == ("toyworld", "toy_tiny", name,
                                         f"{r['config_hash']}-{fingerprint[:8]}.json")
        assert r["config"]["generation"]["max_new_tokens"] == 64
        assert r["config"]["dataset"]["n_prompts"] == 40
        m = r["metrics"]["static"]
        assert m["mae_ci"][0] <= m["mae"] <= m["mae_ci"][1]
        assert m["n"] == r["dataset"]["n_test"] or name == "noise_floor"
    # every run used the same cached world
    assert len({json.dumps(r[0]["stage_keys"], sort_keys=True) for r in results.values()}) == 1
    # suite members resolve their interpolations against this run's overrides
    assert results["bin_classifier"][0]["predictor"]["params"]["max_length"] == 64
    assert results["mlp_probe"][0]["predictor"]["params"]["progress"] is False


def test_static_and_dynamic_metric_shapes(results):
    mlp = results["mlp_probe"][0]
    assert mlp["predictor"]["dynamic"] is True
    dyn = mlp["metrics"]["dynamic"]
    assert len(dyn["mae_by_progress"]) == 10 and dyn["mae"] > 0
    for name in ("constant", "prompt_length", "bin_classifier"):
        assert results[name][0]["metrics"]["dynamic"] is None
        assert results[name][0]["predictor"]["dynamic"] is False
    # its own expectation, and the median of its distribution, which every distribution
    # predictor is scored at too
    assert set(results["bin_classifier"][0]["metrics"]["variants"]) == {"expectation", "median"}
    # bin decoding by centre: predictions are centres of 50 bins of width 64/50
    pred = np.array(results["bin_classifier"][0]["predictions"]["pred"])
    k = pred / (64 / 50) - 0.5
    assert np.allclose(k, np.round(k)) and k.min() >= 0 and k.max() <= 49


def test_numbers_recompute_from_the_cached_labels(results, labels):
    train = labels[labels["split"] == "train"]
    test = labels[labels["split"] == "test"]
    assert results["constant"][0]["dataset"]["n_test"] == len(test)
    assert results["constant"][0]["dataset"]["n_train"] == len(train)
    # labels: censored rows dropped (default), n_samples rows per prompt at most, no duplicates
    assert not labels["censored"].any() and (labels["finish_reason"] == "stop").all()
    assert labels.groupby("prompt_id").size().max() <= 2
    assert not labels.duplicated(["prompt_id", "sample_idx"]).any()
    assert (labels["L"] == labels["output_token_ids"].map(len)).all()
    # constant = train median, scored on the test rows in order
    const = results["constant"][0]
    true = test["L"].to_numpy()
    assert const["predictions"]["true"] == true.tolist()
    assert const["predictions"]["pred"] == [float(np.median(train["L"]))] * len(test)
    assert const["metrics"]["static"]["mae"] == pytest.approx(
        np.abs(true - np.median(train["L"])).mean())
    # noise floor = each sample predicted by the median of its prompt's other samples
    nf = results["noise_floor"][0]
    want = noise_floor_predictions(true, test["prompt_id"].to_numpy())
    keep = np.isfinite(want)
    assert keep.any()
    assert nf["predictions"]["pred"] == want[keep].tolist()
    assert nf["predictions"]["true"] == true[keep].tolist()
    assert nf["metrics"]["static"]["mae"] == pytest.approx(np.abs(true[keep] - want[keep]).mean())


def test_leaderboard_lists_every_row(e2e: E2ERun, results):
    board = board_text(e2e.leaderboard_dir / "README.md")
    rows = [ln for ln in board.splitlines() if ln.startswith("| ")]
    for name in SUITE:
        mae = results[name][0]["metrics"]["static"]["mae"]
        assert any(ln.startswith(f"| {name} | {mae:.1f} |") for ln in rows), name
    bounds = results["noise_floor"][0]["metrics"]["noise_floor"]
    floor = f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
    assert any(ln.startswith(f"| *noise_floor* (ref) | {floor} |") for ln in rows)
    assert bounds["in_sample"] < bounds["leave_one_out"]
    assert "5 ok, 0 failed" in board
    assert list(e2e.leaderboard_dir.glob("*.png"))


def test_run_writes_nothing_into_the_repo(e2e: E2ERun):
    assert list((e2e.cache_dir / "hydra" / "run").iterdir())  # Hydra's run folder: the cache
    assert not (REPO / "outputs").exists() and not (REPO / "multirun").exists()


def test_rerun_reuses_cached_stages(e2e: E2ERun, results, tmp_path):
    keys = results["bin_classifier"][0]["stage_keys"]
    stages = {name: _stage(e2e.cache_dir, name, keys[name])
              for name in ("promptset", "generate", "features")}
    before = {name: (p.stat().st_mtime_ns, (p / "stage.json").stat().st_mtime_ns)
              for name, p in stages.items()}
    listing = sorted(str(p.relative_to(e2e.cache_dir)) for p in e2e.cache_dir.glob("*/*"))

    proc = run_lenbench(*E2E_UPSTREAM, "predictor=bin_classifier",
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode == 0, proc.stderr[-4000:]

    after = {name: (p.stat().st_mtime_ns, (p / "stage.json").stat().st_mtime_ns)
             for name, p in stages.items()}
    assert after == before  # nothing upstream was rebuilt
    assert sorted(str(p.relative_to(e2e.cache_dir)) for p in e2e.cache_dir.glob("*/*")) == listing
    again = _results(tmp_path / "results")
    r = again["bin_classifier"][0]
    assert r["stage_keys"] == keys
    # same config and seed: the same result file name and the same numbers
    old = results["bin_classifier"][0]
    assert r["config_hash"] == old["config_hash"]
    assert r["metrics"] == old["metrics"]
    assert r["predictions"] == old["predictions"]


def test_in_process_run_resolves_suite_members_against_overrides(e2e: E2ERun, tmp_path):
    """`compose` + `run()` (no Hydra app): suite members must still see the overrides."""
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR, run

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[*E2E_UPSTREAM, *e2e.paths(tmp_path / "results"),
                                           "predictor.suite=[constant,bin_classifier]",
                                           "sim.enabled=false"])
        written = run(cfg)
    by_name = {r["predictor"]["name"]: r for r in written}
    assert sorted(by_name) == ["bin_classifier", "constant", "noise_floor"]
    assert by_name["bin_classifier"]["predictor"]["params"]["max_length"] == 64
    assert by_name["bin_classifier"]["predictor"]["params"]["progress"] is False
    assert len(list((tmp_path / "results").rglob("*.json"))) == 3


def test_concurrent_runs_share_a_stage_safely(e2e: E2ERun, tmp_path):
    """Two jobs that need the same new labels at once: one builds them, the other waits."""
    upstream = [o for o in E2E_UPSTREAM if not o.startswith("dataset.n_prompts")]
    upstream += ["dataset.n_prompts=30", "generation.max_new_tokens=48", "sim.enabled=false"]
    procs = [subprocess.Popen(lenbench_cmd(*upstream, "predictor=constant",
                                           *e2e.paths(tmp_path / f"r{i}", tmp_path / f"b{i}")),
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-3000:] for e in errs]
    a, b = (_results(tmp_path / f"r{i}")["constant"][0] for i in range(2))
    assert a["stage_keys"] == b["stage_keys"]
    assert a["metrics"] == b["metrics"] and a["predictions"] == b["predictions"]
    gen = e2e.cache_dir / "generate"
    assert (gen / a["stage_keys"]["generate"] / "stage.json").exists()
    assert not list(gen.glob("*.partial"))

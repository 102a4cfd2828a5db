"""Result files of every age load into the same typed `Result`, through one loader that upgrades
older layouts in one place (lenbench/results/upgrade.py).

The files under tests/data/result_forms are real results from leaderboard/results, one per form
schema 1 has taken (their per-row lists cut to 8 rows and their scheduling record dropped, to
keep them small): `before_fingerprints` (no fingerprints, no row identities, no protocol
version), `before_protocol_version` (fingerprints and row identities, no protocol version) and
`current`. The form before reports and failed runs are built here from them and from the golden
failed run.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.worlds import CFG, make_world

from lenbench.evaluate import failed_result
from lenbench.results import (
    PROTOCOL_VERSION,
    SCHEMA_VERSION,
    ErrorInfo,
    Fingerprints,
    Metrics,
    Result,
    ResultError,
    Timings,
    load_result,
    load_results,
    read_result,
    write_result,
)
from lenbench.results.upgrade import (
    SCHEMA_1_STEPS,
    SCHEMA_STEPS,
    add_fingerprints,
    add_protocol_version,
    add_report,
    upgrade,
)

FORMS = Path(__file__).parent / "data" / "result_forms"
GOLDEN_FAILED = (Path(__file__).parent / "data" / "golden_results" / "toyworld" / "toy"
                 / "constant" / "a1b7ae65841b.json")


def _raw(name: str) -> dict[str, Any]:
    return json.loads((FORMS / f"{name}.json").read_text(encoding="utf-8"))


def test_every_form_in_the_results_folder_loads_into_the_same_typed_result() -> None:
    results = {r.source.removesuffix(".json"): r for r in load_results(FORMS)[0]}
    assert set(results) == {"before_fingerprints", "before_protocol_version", "current"}
    for name, r in results.items():
        raw = _raw(name)
        assert isinstance(r, Result) and r.ok and r.schema_version == SCHEMA_VERSION
        assert (r.dataset.name, r.model.name, r.predictor.name, r.seed, r.kind) == (
            raw["dataset"]["name"], raw["model"]["name"], raw["predictor"]["name"],
            raw["seed"], raw["kind"])
        assert r.metrics.static == raw["metrics"]["static"]  # blocks of figures kept whole
        assert r.timings.fit_s == raw["timings"]["fit_s"]
        assert r.predictions.true == raw["predictions"]["true"]
        assert r.config == raw["config"] and r.report == raw["report"]

    old, mid, now = (results[k] for k in ("before_fingerprints", "before_protocol_version",
                                          "current"))
    assert old.protocol_version == mid.protocol_version == 1  # the field did not exist yet
    assert now.protocol_version == PROTOCOL_VERSION
    assert old.fingerprints is None and old.labels_fingerprint is None
    assert old.predictions.prompt_id is None and old.predictions.censored is None
    assert mid.fingerprints == Fingerprints(**_raw("before_protocol_version")["fingerprints"])
    assert mid.labels_fingerprint == now.labels_fingerprint  # the same build of the labels
    assert mid.predictions.prompt_id is not None and mid.causality is None
    assert now.causality["passed"] is True and not now.audit_failed
    assert old.model.source is not None and old.model.source["source"] == "gguf"
    assert old.metrics.noise_floor is None  # written before the in-sample bound existed


def test_a_file_from_before_reports_loads_with_an_empty_report(tmp_path: Path) -> None:
    raw = _raw("before_fingerprints")
    del raw["report"]
    path = tmp_path / "r.json"
    write_result(path, raw)
    r = load_result(path)
    assert r.report == {} and r.protocol_version == 1 and r.fingerprints is None
    assert r.source == str(path)


def test_failed_runs_of_every_form_load_with_their_error(tmp_path: Path) -> None:
    raw = json.loads(GOLDEN_FAILED.read_text(encoding="utf-8"))
    assert "report" not in raw and "fingerprints" not in raw and raw["metrics"] is None
    oldest = copy.deepcopy(raw)
    del oldest["protocol_version"]
    for data, protocol in ((raw, PROTOCOL_VERSION), (oldest, 1)):
        r = read_result(data, source="failed.json")
        assert r.status == "failed" and not r.ok and r.protocol_version == protocol
        assert r.error == ErrorInfo("ValueError", "train split is empty\nsecond line of detail",
                                    raw["error"]["traceback"])
        assert r.metrics == Metrics() and r.timings == Timings() and r.predictions is None
        assert r.report == {} and r.fingerprints is None and r.source == "failed.json"
    # a failed run as evaluate writes it today: fingerprints and protocol recorded
    world = make_world(2)
    now = Result.from_mapping(failed_result(world, "tq", {"name": "tq"}, CFG, 0,
                                            RuntimeError("boom")))
    assert now.error.type == "RuntimeError" and now.error.message == "boom"
    assert now.protocol_version == PROTOCOL_VERSION and now.fingerprints is not None
    assert now.labels_fingerprint == world.fingerprints["labels"] and now.source == ""


def test_each_step_fills_its_field_only_where_it_is_missing() -> None:
    for step, field, filled in ((add_report, "report", {}),
                                (add_fingerprints, "fingerprints", None),
                                (add_protocol_version, "protocol_version", 1)):
        assert step({"schema_version": 1})[field] == filled
        present = {"schema_version": 1, field: "kept"}
        assert step(dict(present)) == present
    assert (add_report, add_fingerprints, add_protocol_version) == SCHEMA_1_STEPS  # oldest first


def test_upgrade_leaves_its_input_alone_and_current_files_as_they_are() -> None:
    old = _raw("before_fingerprints")
    before = copy.deepcopy(old)
    up = upgrade(old)
    assert old == before
    assert up == {**old, "fingerprints": None, "protocol_version": 1}
    current = _raw("current")
    assert upgrade(current) == current


def test_every_schema_version_below_the_current_one_has_a_step() -> None:
    assert set(SCHEMA_STEPS) == set(range(1, SCHEMA_VERSION))


def test_the_loader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ResultError, match="bad.json: not readable JSON"):
        load_result(bad)
    future = {**_raw("current"), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ResultError, match="upgrade lenbench"):
        read_result(future, source="future.json")

"""The tidy results table: every figure of a results folder, traceable to its JSON."""

from __future__ import annotations

import json
import math

import pandas as pd
from helpers.leaderboard import GOLDEN, synthetic_result

from lenbench.leaderboard.document import main
from lenbench.leaderboard.table import COLUMNS, load_table, result_rows, results_table
from lenbench.results import load_results


def _value(table: pd.DataFrame, **where) -> float:
    rows = table
    for column, wanted in where.items():
        rows = rows[rows[column] == wanted]
    assert len(rows) == 1, (where, rows)
    return float(rows["value"].iloc[0])


def test_every_number_in_a_result_is_a_row_with_its_value():
    results, problems = load_results(GOLDEN)
    assert results and all("broken" in p for p in problems)  # the folder's deliberately bad file
    table = results_table(results)
    assert list(table.columns) == COLUMNS
    for r in results:
        if r.status != "ok":
            assert result_rows(r) == []  # a failed run has no figures
            continue
        who = {"predictor": r.predictor.name, "seed": r.seed, "variant": ""}
        static = r.metrics.static
        assert _value(table, metric="static.mae", **who) == static["mae"]
        low, high = static["mae_ci"]
        assert _value(table, metric="static.mae_ci_low", **who) == low
        assert _value(table, metric="static.mae_ci_high", **who) == high
        for key, value in r.timings.items():
            if isinstance(value, int | float) and math.isfinite(value):
                assert _value(table, metric=f"timings.{key}", **who) == value
        for variant, block in r.metrics.variants.items():
            assert _value(table, metric="static.mae", predictor=who["predictor"],
                          seed=r.seed, variant=variant) == block["mae"]
        dynamic = r.metrics.dynamic
        if dynamic:
            assert _value(table, metric="dynamic.mae", **who) == dynamic["mae"]


def test_seeds_and_predictors_stay_apart_and_failed_runs_add_no_figures(tmp_path):
    res = tmp_path / "results"
    synthetic_result(res, "alpha", 0, fit_s=1.5)
    synthetic_result(res, "alpha", 1, fit_s=2.5)
    synthetic_result(res, "beta", 0, fit_s=9.0)
    first = json.loads(next(res.rglob("*.json")).read_text())
    (res / "not_json.json").write_text("{")
    table, problems = load_table(res)
    assert len(problems) == 1 and "not_json.json" in problems[0]
    fit = table[table["metric"] == "timings.fit_s"].set_index(["predictor", "seed"])["value"]
    assert fit.to_dict() == {("alpha", 0): 1.5, ("alpha", 1): 2.5, ("beta", 0): 9.0}
    assert set(table["dataset"]) == {first["dataset"]["name"]}
    assert not table.duplicated(COLUMNS[:-1]).any()


def test_the_console_script_writes_the_table_as_csv(tmp_path):
    res = tmp_path / "results"
    synthetic_result(res, "alpha", 0)
    out = tmp_path / "tables" / "figures.csv"
    assert main(["--results", str(res), "--out", str(tmp_path / "board"),
                 "--table", str(out)]) == 0
    written = pd.read_csv(out, keep_default_na=False)
    expected, _ = load_table(res)
    assert list(written.columns) == COLUMNS and len(written) == len(expected)
    mae = written[(written["metric"] == "static.mae") & (written["variant"] == "")]
    assert mae["value"].tolist() == expected[(expected["metric"] == "static.mae")
                                             & (expected["variant"] == "")]["value"].tolist()

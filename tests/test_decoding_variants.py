"""Every decoding scored like a predictor: stored variant predictions, the median decoding of a
distribution predictor (at run time, and added to older results from their quantiles), a paired
Δ for variant rows, and the bold rule (one seed never bold; the family's size stated)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from lenbench.leaderboard.blocks import Table
from lenbench.leaderboard.document import family_note
from lenbench.leaderboard.main_table import main_table
from lenbench.leaderboard.rows import build_rows
from lenbench.results import Result
from lenbench.results.add_median import add_median, median_variant
from lenbench.results.model import MEDIAN_VARIANT, Predictions
from lenbench.scoring.comparisons import PROMPTS_ONLY, delta_text, separated


def _bin_result(e2e) -> dict:
    (path,) = sorted(e2e.results_dir.rglob("bin_classifier/*.json"))
    return json.loads(path.read_text())


def test_a_run_scores_and_stores_the_median_of_its_distribution(e2e) -> None:
    r = _bin_result(e2e)
    preds = Predictions.from_mapping(r["predictions"])
    median = np.asarray(r["predictions"]["variants"][MEDIAN_VARIANT])
    levels = r["predictions"]["quantile_levels"]
    column = np.asarray(r["predictions"]["quantiles"])[:, levels.index(0.5)]
    assert np.array_equal(median, column)  # the stored quantiles give it back
    assert not np.array_equal(median, np.asarray(preds.pred))  # argmax is another decoding
    true = np.asarray(preds.true, dtype=float)
    assert r["metrics"]["variants"][MEDIAN_VARIANT]["mae"] == pytest.approx(
        np.abs(median - true)[~np.asarray(preds.censored)].sum() / len(true)
        + np.maximum(true - median, 0)[np.asarray(preds.censored)].sum() / len(true))
    # every variant's predictions are stored beside its figures
    assert set(r["predictions"]["variants"]) == set(r["metrics"]["variants"])


def test_the_median_added_to_an_older_result_is_the_one_a_run_scores(e2e) -> None:
    run = _bin_result(e2e)
    older = copy.deepcopy(run)
    del older["metrics"]["variants"][MEDIAN_VARIANT]
    del older["predictions"]["variants"][MEDIAN_VARIANT]
    figures = median_variant(older)
    assert figures == run["metrics"]["variants"][MEDIAN_VARIANT]
    added = add_median(older, figures)
    assert added["predictions"]["variants"] == run["predictions"]["variants"]
    assert added["rescored"]["variants"]["added"] == [MEDIAN_VARIANT]
    assert median_variant(added) is None  # nothing twice
    no_quantiles = copy.deepcopy(older)
    del no_quantiles["predictions"]["quantiles"]
    assert median_variant(no_quantiles) is None


def test_decoded_rows_come_from_the_stored_variant_or_the_median_quantile() -> None:
    p = Predictions(true=[10, 20], pred=[1, 2], prompt_id=["a", "b"],
                    quantile_levels=[0.25, 0.5, 0.75], quantiles=[[5, 9, 12], [15, 19, 30]],
                    variants={"expectation": [8.5, 21.0]})
    assert p.decoded("expectation").pred == [8.5, 21.0]
    assert p.decoded(MEDIAN_VARIANT).pred == [9, 19]
    assert p.decoded("argmax_bin") is None
    short = Predictions(true=[10, 20], pred=[1, 2], variants={"expectation": [8.5]})
    assert short.decoded("expectation") is None  # not one value a row


def test_a_variant_row_gets_its_paired_delta(e2e) -> None:
    results = [Result.from_mapping(json.loads(p.read_text()))
               for p in e2e.results_dir.rglob("*.json")]
    rows, _ = build_rows([r for r in results if r.status == "ok"])
    table, ref = main_table(rows, "mlp_probe")
    col = table.header.index("Δ vs mlp_probe")
    cells = {row[0]: row[col] for row in table.rows}
    median = next(v for k, v in cells.items() if "bin_classifier (median)" in str(k))
    assert "[" in median  # a paired difference, not a dash


def test_one_seed_is_never_bold_and_says_so() -> None:
    d = {"mean": -8.5, "ci": [-14.9, -2.3], "excludes_zero": True, "seeds": [1, 3]}
    assert not separated(d)
    assert delta_text(d) == f"-8.5 [-14.9, -2.3]{PROMPTS_ONLY}"
    assert delta_text({**d, "seeds": [3, 3]}) == "**-8.5** [-14.9, -2.3]"
    assert delta_text({**d, "excludes_zero": False, "seeds": [3, 2]}) == "-8.5 [-14.9, -2.3]"
    # an untrained reference (the siblings' distribution) has no training to cover
    assert delta_text({**d, "seeds": [3, 1]}, trained_reference=False).startswith("**")
    assert not separated({**d, "seeds": [1, 1]}, trained_reference=False)


def test_the_family_of_deltas_is_counted_beside_the_bold() -> None:
    table = Table(["Predictor", "MAE", "Δ vs ref", "Seeds"],
                  [["a", "1", "**-2.0** [-3.0, -1.0]", "3"], ["b", "1", "+0.1 [-1.0, +1.2]", "3"],
                   ["c", "1", "—", "3"], ["ref", "1", "(reference)", "3"]])
    (note,) = family_note(table, "ref")
    assert "test 2 differences with ref" in note.text and "1 are bold" in note.text
    assert family_note(table, None) == []

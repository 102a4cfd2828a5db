"""CONTRIBUTING.md's "Add a predictor (five minutes)", followed as written: its class, YAML and
test are copied out of the page into a folder outside lenbench, then tested with
`lenbench.testing` and run through the `lenbench` command with the page's overrides."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import E2E_UPSTREAM, REPO, E2ERun, run_lenbench

from lenbench import LengthDistribution, Needs, Predictor
from lenbench.testing import TASKS, fit_and_score, synthetic_splits

FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _section() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return text.split("## Add a predictor (five minutes)", 1)[1].split("\n## ", 1)[0]


def _files(folder: Path) -> dict[str, Path]:
    """Every fenced block of the section whose first line names its file, written there."""
    out = {}
    for _, body in FENCE.findall(_section()):
        lines = [ln[3:] if ln.startswith("   ") else ln for ln in body.splitlines()]
        first = lines[0].strip()
        if first.startswith("# ") and "/" in first and " " not in first[2:]:
            path = folder / first[2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
            out[first[2:]] = path
    return out


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "user"
    files = _files(folder)
    assert sorted(files) == ["myconf/predictor/word_median.yaml", "mypredictors/word_median.py",
                             "tests/test_word_median.py"]
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in [m for m in sys.modules if m.startswith("mypredictors")]:
        del sys.modules[name]


def test_the_pages_predictor_and_its_test_run(user_folder: Path, tmp_path: Path) -> None:
    predictor = importlib.import_module("mypredictors.word_median").WordMedian
    assert issubclass(predictor, Predictor) and predictor.needs == Needs(text=True)
    spec = importlib.util.spec_from_file_location(
        "test_word_median", user_folder / "tests" / "test_word_median.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_word_median_beats_the_train_median(tmp_path / "splits")  # the page's own test
    scored = fit_and_score(predictor(min_count=3), synthetic_splits(tmp_path / "again"))
    assert isinstance(scored.distribution, LengthDistribution)
    assert np.array_equal(scored.static, scored.distribution.quantile([0.5])[:, 0])
    with pytest.raises(ValueError, match="min_count"):
        predictor(min_count=0)


def test_the_synthetic_splits_are_what_the_harness_hands_over(tmp_path: Path) -> None:
    splits = synthetic_splits(tmp_path, n_prompts=50, samples_per_prompt=3)
    ids = [set(s.group_ids) for s in (splits.train, splits.val, splits.test)]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])  # split by prompt
    assert sum(len(s) for s in (splits.train, splits.val, splits.test)) == 150
    test = splits.test
    assert test.lengths.min() >= 1 and test.lengths.max() <= splits.max_length
    static = test.static_view(Needs(text=True, hidden=("mid",)))
    assert static.hidden("mid").shape == (len(test), 16)
    assert all(any(t in p.split() for t in TASKS) for p in static.prompts)
    assert len(test.steps) == test.lengths.sum()
    assert static.entropy(0).shape == (len(static.prompt_token_ids[0]),)


class _Probe(Predictor):
    """Least squares on the prompt state, and on the step state for the remaining length."""

    needs = Needs(hidden=("mid",), steps=True)

    def fit(self, train, val=None) -> None:
        x = np.c_[train.hidden("mid"), np.ones(len(train))]
        self.w = np.linalg.lstsq(x, train.lengths, rcond=None)[0]
        steps = train.steps
        xs = np.c_[steps.hidden("mid"), np.ones(len(steps))]
        self.ws = np.linalg.lstsq(xs, steps.remaining, rcond=None)[0]

    def predict(self, split) -> np.ndarray:
        return np.c_[split.hidden("mid"), np.ones(len(split))] @ self.w

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        return np.c_[steps.hidden("mid"), np.ones(len(steps))] @ self.ws


def test_fit_and_score_runs_a_dynamic_predictor_and_checks_its_output(tmp_path: Path) -> None:
    splits = synthetic_splits(tmp_path)
    scored = fit_and_score(_Probe(), splits)
    assert scored.static_mae < 0.6 * scored.median_mae  # the task is readable from the state
    assert scored.remaining.shape == (len(splits.test.steps),) and scored.dynamic_mae > 0

    class Short(_Probe):
        def predict(self, split) -> np.ndarray:
            return super().predict(split)[:-1]

    with pytest.raises(AssertionError, match=f"predict must return {len(splits.test)} finite"):
        fit_and_score(Short(), splits)


def test_the_page_runs_through_the_lenbench_command(user_folder: Path, e2e: E2ERun,
                                                     tmp_path: Path) -> None:
    proc = run_lenbench(f"hydra.searchpath=[file://{user_folder / 'myconf'}]",
                        "predictor=word_median", "predictor.min_count=3", *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"),
                        env={"PYTHONPATH": str(user_folder)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    [path] = (tmp_path / "results").rglob("word_median/*.json")
    result = json.loads(path.read_text())
    assert result["status"] == "ok" and result["predictor"]["params"] == {"min_count": 3}
    assert result["metrics"]["distribution"]["static"]["crps"] > 0
    assert result["causality"]["passed"] is True

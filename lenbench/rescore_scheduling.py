"""Rescore the scheduling block of stored results from their test predictions.

    python -m lenbench.rescore_scheduling leaderboard/results [more folders or files]

The simulator reads a predictor's test predictions, the rows' true lengths and censored flags
(all in `predictions`) and the rows' prompt lengths. Results written since the score's ceiling
became the oracle store the prompt lengths too; for an older one they are read from its world's
labels (the cached generate stage the result names, or else its shipped world, loaded without
features; nothing is generated) and checked against its rows' prompt ids and lengths, then
stored in the file so that the next rescoring needs nothing else. The block is recomputed with
the same sim config and simulator seeds, so on the same draws, under today's score
(`sim.record`); the predictor is not run again. A record with a comparison (sim.compare)
needs the predictor's dynamic estimates, which are not stored: it is left as it is and
reported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.configs import load_preset
from lenbench.results import write_result
from lenbench.results.provenance import utc_now
from lenbench.sim.record import rescore_scheduling

log = logging.getLogger("lenbench.rescore_scheduling")


def world_prompt_lengths(result: dict[str, Any], cache_dir: str | None = None) -> np.ndarray:
    """The prompt lengths (rendered prompt tokens) of a result's test rows, from its world's
    labels: the cached generate stage the result names, or else its shipped world (loaded
    without features; nothing is generated). Checked against the result's prompt ids and true
    lengths, row by row."""
    import pandas as pd

    cfg = dict(result["config"])
    cache = Path(cache_dir or (cfg.get("paths") or {}).get("cache_dir") or ".cache/lenbench")
    key = (result.get("stage_keys") or {}).get("generate") or (result.get("dataset") or {}).get(
        "key")
    cached = cache / "generate" / str(key) / "labels.parquet"
    if cached.exists():
        labels = pd.read_parquet(cached, columns=["prompt_id", "split", "L", "prompt_token_ids"])
    elif (cfg.get("generation") or {}).get("shipped"):
        from lenbench.pipeline import prepare_world

        cfg["paths"] = {**(cfg.get("paths") or {}), "cache_dir": str(cache)}
        labels = prepare_world(cfg, need_features=False, progress=False).labels
    else:
        raise ValueError(f"stage_keys.generate: the labels of world {key} are neither in the "
                         f"cache ({cached}) nor shipped; build the world first, or pass "
                         "--cache-dir")
    test = labels[labels["split"].to_numpy() == "test"]
    preds = result["predictions"]
    if [str(i) for i in test["prompt_id"]] != [str(i) for i in preds.get("prompt_id") or []]:
        raise ValueError("predictions.prompt_id: the world's test rows are other rows than the "
                         "result's (another build of the data)")
    if not np.array_equal(test["L"].to_numpy(), np.asarray(preds["true"])):
        raise ValueError("predictions.true: the world's test lengths differ from the result's")
    return test["prompt_token_ids"].map(len).to_numpy(dtype=np.int64)


def rescore_result(result: dict[str, Any], prompt_len: np.ndarray | None = None,
                   score_alphas: Sequence[float] | None = None) -> dict[str, Any]:
    """`result` with its scheduling block recomputed (and `predictions.prompt_len` stored);
    `prompt_len` is read from the result when None."""
    preds = result["predictions"]
    if prompt_len is None:
        if preds.get("prompt_len") is None:
            raise ValueError("predictions.prompt_len: missing; pass the world's prompt lengths")
        prompt_len = np.asarray(preds["prompt_len"], dtype=np.int64)
    if len(prompt_len) != len(preds["true"]):
        raise ValueError(f"predictions.prompt_len: {len(prompt_len)} values for "
                         f"{len(preds['true'])} rows")
    censored = preds.get("censored")
    sched = rescore_scheduling(result["scheduling"], result["predictor"]["name"],
                               np.asarray(preds["true"]), np.asarray(preds["pred"]),
                               prompt_len, None if censored is None else np.asarray(censored),
                               score_alphas=score_alphas)
    sched["rescored"] = {"at": utc_now(),
                         "from": "the stored test predictions, on the recorded draws"}
    return {**result, "scheduling": sched,
            "predictions": {**preds, "prompt_len": [int(n) for n in prompt_len]}}


def _files(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lenbench.rescore_scheduling",
        description="Recompute the scheduling block of result files from their stored test "
                    "predictions (docs/protocol.md, 'The scheduling score'), in place.")
    parser.add_argument("paths", nargs="+", help="result files or folders of them")
    parser.add_argument("--cache-dir", default=os.environ.get("LENBENCH_CACHE_DIR"),
                        help="lenbench's cache, for the labels of results that do not store "
                             "their prompt lengths (default: LENBENCH_CACHE_DIR, else the one "
                             "each result recorded)")
    parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    alphas = load_preset("sim", "default").get("score_alphas")
    worlds: dict[str, np.ndarray | ValueError] = {}  # prompt lengths, or why there are none
    failed = 0
    for path in _files(args.paths):
        if path.name.startswith("."):  # an interrupted write's temporary file
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        if result.get("kind") != "predictor" or not result.get("scheduling") \
                or not result.get("predictions"):
            continue
        try:
            lengths = None
            if result["predictions"].get("prompt_len") is None:
                key = str((result.get("stage_keys") or {}).get("generate")
                          or (result.get("dataset") or {}).get("key"))
                if key not in worlds:
                    log.info("reading the prompt lengths of world %s", key)
                    try:
                        worlds[key] = world_prompt_lengths(result, args.cache_dir)
                    except ValueError as exc:
                        worlds[key] = exc
                found = worlds[key]
                if isinstance(found, ValueError):
                    raise found
                lengths = found
            new = rescore_result(result, lengths, alphas)
        except (KeyError, ValueError) as exc:
            failed += 1
            log.warning("%s: not rescored: %s", path, exc)
            continue
        head = {h["row"]: h for h in new["scheduling"]["headline"]}
        own = head.get(result["predictor"]["name"]) or next(
            h for row, h in head.items() if row not in ("baseline", "oracle", "constant"))
        old = next((h for h in result["scheduling"].get("headline") or []
                    if h.get("row") == own["row"]), {})
        log.info("%s: score %s -> %s (%s)", path, _pct(old.get("score")), _pct(own["score"]),
                 new["scheduling"]["score_metric"])
        if not args.dry_run:
            write_result(path, new)
    return 1 if failed else 0


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


if __name__ == "__main__":
    raise SystemExit(main())

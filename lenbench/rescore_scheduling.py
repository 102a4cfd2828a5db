"""Rescore the scheduling block of stored results from their test predictions.

    python -m lenbench.rescore_scheduling leaderboard/results [more folders or files]

    python -m lenbench.rescore_scheduling DIR --dry-run --out old-vs-new.md

The simulator reads a predictor's test predictions, the rows' true lengths and censored flags
(all in `predictions`) and the rows' prompt lengths. Results written since the score's ceiling
became the oracle store the prompt lengths too; for an older one they are read from its world's
labels (the cached generate stage the result names, or else its shipped world: the one its
config names, or the one whose card carries its labels fingerprint, as the toy world a run takes
through its model's card; loaded without features, and only when the run's model and sample
settings are the world's, so that nothing is trained or generated) and checked against its rows'
prompt ids and lengths, then stored in the file so that the next rescoring needs nothing else.
The block is recomputed with the same sim config and simulator seeds, so on the same draws, under
today's score (`sim.record`); the predictor is not run again, and the file's `protocol_version`
becomes this protocol (its other figures follow rules no later protocol changed; a file whose
static figures are older is refused: `python -m lenbench.results.rescore` first). A record with a
comparison (sim.compare) needs the predictor's dynamic estimates, which are not stored: it is
left as it is and reported. Each file's figures are printed old beside new.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.configs import RunConfig, preset_config
from lenbench.configs.model import ToyModel
from lenbench.results import PROTOCOL_VERSION, write_result
from lenbench.results.provenance import utc_now
from lenbench.results.versions import changed_since
from lenbench.sim.record import protocol_settings, rescorable_config, rescore_scheduling

# (label, key) of a predictor's headline figures printed old beside new, after its score
CHANGES_SHOWN = (("All mean change", "e2e_mean_all_change"),
                 ("Short mean change", "e2e_mean_short_change"),
                 ("Long mean change", "e2e_mean_long_change"),
                 ("Capped mean change", "e2e_mean_capped_change"),
                 ("Capped P99 change", "e2e_p99_capped_change"))

log = logging.getLogger("lenbench.rescore_scheduling")


def world_prompt_lengths(result: dict[str, Any], cache_dir: str | None = None) -> np.ndarray:
    """The prompt lengths (rendered prompt tokens) of a result's test rows, from its world's
    labels: the cached generate stage the result names, or else its shipped world (loaded
    without features; nothing is generated). Checked against the result's prompt ids and true
    lengths, row by row."""
    import pandas as pd

    # the stored config is typed only to rebuild the world: a cached world needs its folder alone
    cache = Path(cache_dir or ((result.get("config") or {}).get("paths") or {}).get("cache_dir")
                 or stored_world_config(result).paths.cache_dir)
    key = (result.get("stage_keys") or {}).get("generate") or (result.get("dataset") or {}).get(
        "key")
    cached = cache / "generate" / str(key) / "labels.parquet"
    if cached.exists():
        labels = pd.read_parquet(cached, columns=["prompt_id", "split", "L", "prompt_token_ids"])
    elif (world := shipped_world_of(result)) is not None:
        from lenbench.pipeline import prepare_world

        stored = stored_world_config(result)
        run = replace(stored, generation=replace(stored.generation, shipped=world),
                      paths=replace(stored.paths, cache_dir=str(cache)))
        check_loads_without_generating(result, run, world)
        labels = prepare_world(run, need_features=False, progress=False).labels
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


# the parts of a stored config that build its world (prepare_world reads nothing else)
WORLD_PARTS = ("paths", "dataset", "model", "generation", "device")


def stored_world_config(result: dict[str, Any]) -> RunConfig:
    """The config a stored result was run with, typed as far as its world goes: a result of an
    older protocol may hold settings today's schemas dropped in parts the world does not read
    (sim), and keys added since take their defaults."""
    stored = result.get("config") or {}
    return RunConfig.from_composed({k: v for k, v in stored.items() if k in WORLD_PARTS})


def shipped_world_of(result: dict[str, Any]) -> str | None:
    """The shipped world whose labels a result was scored on: the one its config names, else the
    one whose card records the result's labels fingerprint (a run that left generation.shipped
    null takes the world its model's card names, as the toy model's does); None if neither."""
    from lenbench.worlds.shipped import CARD_FILE, available, world_folder

    named = stored_world_config(result).generation.shipped
    if named:
        return str(named)
    fingerprint = (result.get("fingerprints") or {}).get("labels")
    for name in available() if fingerprint else ():
        card = json.loads((world_folder(name) / CARD_FILE).read_text(encoding="utf-8"))
        if card.get("labels_fingerprint") == fingerprint:
            return name
    return None


def check_loads_without_generating(result: dict[str, Any], run: RunConfig, world: str) -> None:
    """ValueError unless loading `world` with the result's config takes every sample from it:
    the model its samples came from (for the toy model, the shipped weights, which its config
    must select: another config would train) and the settings that decide a sample."""
    from lenbench.models.loading import resolve_device, resolve_dtype
    from lenbench.models.shipped_toy import shipped_toy_model
    from lenbench.pipeline import generation_stage_config
    from lenbench.worlds.shipped import ShippedWorld, sample_key

    model = run.model
    key = str((result.get("model") or {}).get("key"))
    if isinstance(model, ToyModel):
        shipped = None if model.retrain else shipped_toy_model(model.toy_config)
        if shipped is None or shipped[1] != key:
            raise ValueError(f"model.toy: the result's toy model is not the one shipped with "
                             f"world {world}; its labels would be sampled here")
    model = replace(model, dtype=resolve_dtype(model.dtype, resolve_device(run.device)))
    settings = sample_key(generation_stage_config(run.generation, model, key))
    if diffs := ShippedWorld.load(world).differences(settings):
        raise ValueError(f"generation: the result's settings differ from world {world}'s "
                         f"({'; '.join(diffs)}); its labels would be generated here")


def rescore_result(result: dict[str, Any], prompt_len: np.ndarray | None = None,
                   score_alphas: Sequence[float] | None = None,
                   protocol: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with its scheduling block recomputed (and `predictions.prompt_len` stored) and
    its protocol this one; `prompt_len` is read from the result when None. A result whose static
    figures predate this protocol's is refused: they would pass for current."""
    before = int(result.get("protocol_version", 1))
    if changed_since("metrics.static", before):
        raise ValueError(f"protocol_version: {before}, whose static figures a later protocol "
                         "changed; rescore them first (python -m lenbench.results.rescore)")
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
                               score_alphas=score_alphas, protocol=protocol)
    sched["rescored"] = {"at": utc_now(), "from_protocol": before,
                         "to_protocol": max(before, PROTOCOL_VERSION),
                         "from": "the stored test predictions, on the recorded draws"}
    out = {**result, "scheduling": sched, "protocol_version": max(before, PROTOCOL_VERSION),
           "predictions": {**preds, "prompt_len": [int(n) for n in prompt_len]}}
    note = result.get("rescored")
    if isinstance(note, dict) and "scheduling" in (note.get("kept") or {}):
        out["rescored"] = {**note, "kept": {k: v for k, v in note["kept"].items()
                                            if k != "scheduling"}}
    return out


def own_headline(sched: dict[str, Any], name: str) -> dict[str, Any]:
    """The predictor's own entry of a scheduling record's headline ({} if none)."""
    rows = [h for h in sched.get("headline") or []
            if h.get("row") not in ("baseline", "oracle", "constant")]
    return next((h for h in rows if h.get("row") == name), rows[0] if rows else {})


def comparison_lines(source: str, name: str, old: dict[str, Any],
                     new: dict[str, Any]) -> list[str]:
    """Markdown rows `| file | figure | old | new |` of one rescored scheduling block."""
    before, after = own_headline(old, name), own_headline(new, name)
    pairs = [("score on", old.get("score_metric"), new.get("score_metric")),
             ("policy", _policy(old), _policy(new)),
             ("load factor (oracle's gain on the mean latency)", _load(old), _load(new)),
             ("Score [95% CI]", _score(before), _score(after)),
             ("short / long threshold (tokens)", _thresholds(old), _thresholds(new)),
             ("classes short / long / capped", _shares(old), _shares(new))]
    pairs += [(label, _change(before.get(key)), _change(after.get(key)))
              for label, key in CHANGES_SHOWN]
    pairs.append(("Score by aging weight", _by_alpha(old), _by_alpha(new)))
    return [f"| {source} | {label} | {a or '—'} | {b or '—'} |" for label, a, b in pairs]


def _policy(sched: dict[str, Any]) -> str:
    return f"{sched.get('policy')}, guard {sched.get('starvation')}"


def _load(sched: dict[str, Any]) -> str:
    """The headline's load and the oracle's gain there in seconds and as a share."""
    heads = {h.get("row"): h for h in sched.get("headline") or []}
    base, best = (heads.get(row, {}).get("e2e_mean_all") for row in ("baseline", "oracle"))
    load = sched.get("load_factor")
    text = "" if load is None else f"{load:.2f}"
    if base and best is not None:
        text += f" ({base - best:.3f} s of {base:.2f} s, {100 * (base - best) / base:.1f}%)"
    return text


def _score(entry: dict[str, Any]) -> str:
    value, ci = entry.get("score"), entry.get("score_ci95")
    if value is None:
        return f"— ({entry['score_reason']})" if entry.get("score_reason") else "—"
    text = f"{100 * value:.1f}%"
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text


def _thresholds(sched: dict[str, Any]) -> str:
    short, long = sched.get("short_threshold"), sched.get("long_threshold")
    return "" if short is None or long is None else f"{short:g} / {long:g}"


def _shares(sched: dict[str, Any]) -> str:
    shares = sched.get("class_shares") or {}
    return " / ".join("—" if shares.get(k) is None else f"{100 * shares[k]:.1f}%"
                      for k in ("short", "long", "capped")) if shares else ""


def _change(value: Any) -> str:
    return "" if value is None else f"{100 * value:+.2f}%"


def _by_alpha(sched: dict[str, Any]) -> str:
    sweep = sched.get("by_alpha") or {}
    cells = []
    for entry in sweep.get("entries") or []:
        own = [row for name, row in (entry.get("rows") or {}).items() if name != "oracle"]
        score = (own[0].get("score") or {}).get("value") if own else None
        cells.append(f"α {entry['aging_alpha']:g}: "
                     + ("—" if score is None else f"{100 * score:.1f}%"))
    return ", ".join(cells)


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
    parser.add_argument("--out", metavar="PATH", help="also write the printout (each file's "
                                                      "figures, old beside new) to PATH")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    preset = preset_config("sim", "default")
    alphas, protocol = preset.score_alphas, protocol_settings(preset.simulation())
    worlds: dict[str, np.ndarray | ValueError] = {}  # prompt lengths, or why there are none
    failed = 0
    lines = ["| file | figure | old | new |", "|---|---|---|---|"]
    left: list[str] = []
    for path in _files(args.paths):
        if path.name.startswith("."):  # an interrupted write's temporary file
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        if result.get("kind") != "predictor" or not result.get("scheduling") \
                or not result.get("predictions"):
            continue
        try:
            rescorable_config(result["scheduling"])  # before reading a world for nothing
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
            new = rescore_result(result, lengths, alphas, protocol)
        except (KeyError, ValueError) as exc:
            failed += 1
            log.warning("%s: not rescored: %s", path, exc)
            left.append(f"{path}: left as it is ({exc})")
            continue
        name = result["predictor"]["name"]
        log.info("%s: score %s -> %s (%s)", path, _score(own_headline(result["scheduling"], name)),
                 _score(own_headline(new["scheduling"], name)), new["scheduling"]["score_metric"])
        lines += comparison_lines(path.as_posix(), name, result["scheduling"], new["scheduling"])
        if not args.dry_run:
            write_result(path, new)
    text = "\n".join([*lines, "", *left]) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

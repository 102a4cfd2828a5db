"""Bring result files of an earlier protocol up to this one from their stored predictions.

    python -m lenbench.results.rescore leaderboard/results            # rescore, print old | new
    python -m lenbench.results.rescore leaderboard/results --dry-run  # print only
    python -m lenbench.results.rescore leaderboard/results --out old-vs-new.md

A result stores each test row's prediction, true length, censored flag and prompt id (and, for a
distribution, its quantiles), so the static figures recompute without the predictor: the file's
static block is scored again under the current rules (`scoring.metrics.static_metrics`), and a
distribution's static block gains the figures this protocol added (`distribution_metrics.
runaway_scores`). A file is rescored only when its stored rows reproduce the MAE and its interval
it recorded; otherwise it is left as it is, and the leaderboard keeps marking it.

What the stored rows cannot give is kept and said: a predictor's decoding variants store no
predictions, so their figures stay those of the earlier protocol, recorded under
``rescored.kept`` (the leaderboard marks those rows ‡). P(L >= cap) per row comes from the file
when it holds it (``predictions.p_cap``), from the siblings for the noise floor's reference
(recomputed from the rows), and otherwise from the five stored quantiles, clipped to the cap: the
same value for a predictor whose quantiles stop at the cap and for a histogram with no mass at or
beyond it, an approximation for any other (``rescored.p_cap`` says which, and the leaderboard
marks such a figure ≈). Dynamic figures and the other distribution figures follow rules that
did not change. A file whose static figures are current is left alone; a scheduling block that a
later protocol's rules changed is kept as it is, recorded under ``rescored.kept`` with its protocol,
and recomputed by `python -m lenbench.rescore_scheduling`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.contract.distributions import LengthDistribution
from lenbench.results import PROTOCOL_VERSION, utc_now, validate_result, write_result
from lenbench.results.versions import changed_since
from lenbench.scoring.distribution_metrics import (
    mass_at_cap,
    runaway_scores,
    sibling_distributions,
)
from lenbench.scoring.metrics import static_metrics

__all__ = ["main", "rescore_result"]

# (label, key in the static block) of the figures printed old | new
STATIC_SHOWN = (("MAE", "mae"), ("MAE CI", "mae_ci"), ("Kendall τ (uncensored)", "kendall_tau"),
                ("C-index", "c_index"), ("Within ±25%", "within_25"),
                ("Within ±25% rows", "within_25_n"), ("Uncens. MAE", "mae_uncensored"),
                ("Runaway AUC", "runaway_auc"))
DIST_SHOWN = (("P(≥ cap) AUC", "runaway_auc"), ("Q(0.9) at cap", "q90_at_cap"),
              ("Q(0.75) at cap", "q75_at_cap"), ("80% coverage", "coverage_80"))


class NotRescored(Exception):
    """Why a file stays as it is (one line)."""


def _cap(data: dict[str, Any]) -> float | None:
    cap = (data["metrics"].get("static") or {}).get("length_cap")
    if cap is None:
        cap = ((data.get("config") or {}).get("generation") or {}).get("max_new_tokens")
    return None if cap is None else float(cap)


def _static(metrics: dict[str, Any], rows: dict[str, Any], cap: float | None, seed: int,
            n_boot: int, ci: float) -> dict[str, Any]:
    """The static block of `metrics` scored again from `rows`; NotRescored unless the stored
    rows give back the recorded MAE and interval."""
    old = metrics["static"]
    true = np.asarray(rows["true"], dtype=np.float64)
    pred = np.asarray([np.nan if p is None else p for p in rows["pred"]], dtype=np.float64)
    censored = np.asarray(rows.get("censored") or [False] * true.size, dtype=bool)
    new = static_metrics(true, pred, np.asarray(rows["prompt_id"]), n_boot=n_boot, seed=seed,
                         ci=ci, censored=censored, cap=cap)
    same_ci = (old.get("mae_ci") is None) == (new["mae_ci"] is None) and (
        old.get("mae_ci") is None or np.allclose(old["mae_ci"], new["mae_ci"], atol=1e-9))
    if not (np.isclose(old.get("mae", np.nan), new["mae"], atol=1e-9) and same_ci):
        raise NotRescored(f"the stored rows give MAE {new['mae']:.4f} {new['mae_ci']}, the file "
                          f"records {old.get('mae')} {old.get('mae_ci')}")
    new["n_excluded"] = old.get("n_excluded", new["n_excluded"])  # rows the file left out
    return {**old, **new}


def _p_cap(data: dict[str, Any], rows: dict[str, Any], cap: float) -> tuple[np.ndarray, str]:
    """Each row's P(L >= cap), and where it came from."""
    if rows.get("p_cap") is not None:
        return np.asarray(rows["p_cap"], dtype=np.float64), "stored"
    if data["kind"] == "reference":  # the siblings: recomputed from the rows themselves
        dist, has = sibling_distributions(rows["true"], np.asarray(rows["prompt_id"]))
        if dist is not None and has.all():
            return mass_at_cap(dist, cap), "siblings recomputed"
    dist = LengthDistribution.from_quantiles(rows["quantile_levels"], rows["quantiles"])
    return mass_at_cap(dist, cap), "stored quantiles"


def rescore_result(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the result under this protocol, what the rescoring did); NotRescored when it cannot."""
    if data.get("status") != "ok":
        raise NotRescored("a failed run has no figures")
    before = int(data.get("protocol_version", 1))
    if before >= PROTOCOL_VERSION:
        raise NotRescored(f"already protocol {before}")
    if not changed_since("metrics.static", before):
        raise NotRescored(f"protocol {before}: its static figures are current (a later protocol "
                          "changed its scheduling block: python -m lenbench.rescore_scheduling)")
    rows = data.get("predictions") or {}
    if not rows.get("prompt_id") or not data["metrics"].get("static"):
        raise NotRescored("no stored rows with prompt ids to score again")
    n_boot, ci, seed = stored_bootstrap(data)
    cap = _cap(data)
    out = json.loads(json.dumps(data))
    out["metrics"]["static"] = _static(data["metrics"], rows, cap, seed, n_boot, ci)
    note: dict[str, Any] = {"from_protocol": before, "to_protocol": PROTOCOL_VERSION,
                            "at": utc_now(), "kept": {}}
    if data["metrics"].get("variants"):
        note["kept"]["metrics.variants"] = before
    if data.get("scheduling") and changed_since("scheduling", before):
        note["kept"]["scheduling"] = before  # python -m lenbench.rescore_scheduling
    transfer = data.get("transfer") or {}
    if (transfer.get("metrics") or {}).get("static"):
        try:
            out["transfer"]["metrics"]["static"] = _static(
                transfer["metrics"], transfer.get("predictions") or {}, cap, seed, n_boot, ci)
        except (NotRescored, KeyError, ValueError):
            note["kept"]["transfer.metrics.static"] = before
    dist = (data["metrics"].get("distribution") or {}).get("static")
    if dist is not None and rows.get("quantiles") is not None and cap is not None:
        p_cap, source = _p_cap(data, rows, cap)
        out["metrics"]["distribution"]["static"] = {**dist, **runaway_scores(
            p_cap, np.asarray(rows["quantiles"]), rows["true"], np.asarray(rows["prompt_id"]),
            rows.get("censored"), cap, n_boot, seed, ci)}
        out["predictions"]["p_cap"] = p_cap.tolist()
        note["p_cap"] = source
    out["protocol_version"] = PROTOCOL_VERSION
    out["rescored"] = note
    return validate_result(out), note


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def comparison_lines(source: str, old: dict[str, Any], new: dict[str, Any],
                     note: dict[str, Any]) -> list[str]:
    """Markdown rows `| file | figure | old | new |` of one rescored result."""
    lines = []
    blocks = [("", STATIC_SHOWN, old["metrics"]["static"], new["metrics"]["static"])]
    old_dist = (old["metrics"].get("distribution") or {}).get("static")
    if old_dist is not None:
        blocks.append(("distribution ", DIST_SHOWN, old_dist,
                       new["metrics"]["distribution"]["static"]))
    for prefix, shown, before, after in blocks:
        for label, key in shown:
            lines.append(f"| {source} | {prefix}{label} | {_text(before.get(key))} "
                         f"| {_text(after.get(key))} |")
    kept = ", ".join(f"{k} (protocol {v})" for k, v in note["kept"].items())
    extra = [f"kept: {kept}"] if kept else []
    extra += [f"P(≥ cap) from {note['p_cap']}"] if note.get("p_cap") else []
    if extra:
        lines.append(f"| {source} | note | | {'; '.join(extra)} |")
    return lines


def stored_bootstrap(data: dict[str, Any]) -> tuple[int, float, int]:
    """(resamples, interval level, seed) a stored result's run bootstrapped its intervals with:
    what a figure added to it later must use to be the figure the run would have written."""
    ev = (data.get("config") or {}).get("eval") or {}
    return int(ev.get("n_boot", 1000)), float(ev.get("ci", 0.95)), int(data.get("seed", 0))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lenbench.results.rescore",
        description="Rescore result files of an earlier protocol from their stored predictions, "
                    "and print each figure that changed, old beside new.")
    parser.add_argument("results", help="folder of result JSON files (searched recursively)")
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    parser.add_argument("--out", metavar="PATH", help="also write the printout to PATH")
    args = parser.parse_args(argv)
    root = Path(args.results)
    if not root.is_dir():
        print(f"rescore: results folder '{root}' does not exist", file=sys.stderr)
        return 2
    lines = ["| file | figure | old | new |", "|---|---|---|---|"]
    left: list[str] = []
    done = 0
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            new, note = rescore_result(data)
        except NotRescored as why:
            left.append(f"{rel}: left as it is ({why})")
            continue
        lines += comparison_lines(rel, data, new, note)
        if not args.dry_run:
            write_result(path, new)
        done += 1
        print(f"rescored {rel} (protocol {note['from_protocol']} -> {PROTOCOL_VERSION})",
              file=sys.stderr, flush=True)
    text = "\n".join([*lines, "", *left]) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    verb = "would rescore" if args.dry_run else "rescored"
    print(f"{verb} {done} result file(s); {len(left)} left as they are", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


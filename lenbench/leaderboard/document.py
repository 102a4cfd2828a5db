"""Assembly of the leaderboard: per (dataset, model) sections from the other modules, provenance,
failed runs, the markdown pages (pages.py) and the site, and the console script."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lenbench.configs.run import PathsConfig
from lenbench.leaderboard.blocks import (
    LEFT,
    RIGHT,
    Block,
    Caption,
    Heading,
    Image,
    Items,
    Table,
    Text,
)
from lenbench.leaderboard.cells import cell_text, mean
from lenbench.leaderboard.details import details_section
from lenbench.leaderboard.distributions import distributions_section
from lenbench.leaderboard.greedy_beside_sampled import companion_pairs, greedy_beside_sampled
from lenbench.leaderboard.main_table import family_note, front_table, main_table
from lenbench.leaderboard.pages import Summary, write_pages
from lenbench.leaderboard.plots import PLOT_PREFIX, progress_plot, scatter_plot
from lenbench.leaderboard.provenance import provenance_blocks
from lenbench.leaderboard.rows import (
    MIN_RANKING_PROMPTS,
    Row,
    build_rows,
    earlier_protocol,
    gap_share_cell,
    main_legend,
    outdated_since,
)
from lenbench.leaderboard.scheduling import scheduling_section
from lenbench.leaderboard.site import World, write_site
from lenbench.leaderboard.transfer import transfer_section
from lenbench.leaderboard.verdict import verdict_blocks
from lenbench.leaderboard.world_names import world_title
from lenbench.results import PROTOCOL_CHANGES, ErrorInfo, Result, load_results_from, safe_name
from lenbench.results.checks import is_number
from lenbench.runtime.figure_files import rendering_aside
from lenbench.scoring.comparisons import DEFAULT_REFERENCE

__all__ = ["build_leaderboard", "gap_share_cell", "main", "world_title"]


# ---------------------------------------------------------------------------------------------
# document


def too_few_prompts(ok: list[Result]) -> int | None:
    """The test prompts of a world too small to rank predictors on (None: enough)."""
    prompts = [int(r.dataset.n_test_prompts) for r in ok if is_number(r.dataset.n_test_prompts)]
    return max(prompts) if prompts and max(prompts) < MIN_RANKING_PROMPTS else None


def _scoring_notes(ok: list[Result], rows: list[Row]) -> list[Block]:
    """What the reader must know before trusting a row: censored rows, clipped predictions,
    the noise floor's rows, and a test split too small to rank on."""
    notes = []
    if not any(r.fingerprints for r in ok):
        notes.append("These results were recorded before lenbench kept label fingerprints and "
                     "row identities: they cannot be paired (Δ shows —), nor told apart from "
                     "results scored on other labels, and the markers newer runs record († and "
                     "non-causal) are missing. Re-run them to get all three.")
    if few := too_few_prompts(ok):
        notes.append(f"**Too few test prompts to rank predictors** ({few} < "
                     f"{MIN_RANKING_PROMPTS}): differences here are anecdotes, not rankings.")
    censored = [r.metrics.static for r in ok if (r.metrics.static or {}).get("n_censored")]
    if censored:
        n = int(censored[0]["n_censored"])
        notes.append(f"{n} test rows are right-censored (cut off at the length cap): a "
                     "prediction at or above the cut-off scores 0 there, a shorter one its "
                     "shortfall (remaining lengths L − t likewise); the C-index counts their "
                     "pairs whose order is decided, Within ±25% only their certain misses. The "
                     "noise floor and the distribution scores score these rows too.")
    clipped = []
    for row in rows:
        if row.variant is not None or row.kind != "predictor":
            continue
        for section, what in (("static", "totals"), ("dynamic", "remaining lengths")):
            low = mean(row.values(f"{section}.n_clipped_low"))
            high = mean(row.values(f"{section}.n_clipped_high"))
            if low or high:
                clipped.append(f"{row.label} ({what}: {low or 0:.0f} below 1, {high or 0:.0f} "
                               "above the cap)")
    if clipped:
        notes.append("Predictions clipped to [1, length cap] before scoring (mean count per "
                     "seed): " + "; ".join(clipped) + ".")
    floors = [r for r in rows if r.kind == "reference" and r.results]
    for row in floors:
        bounds = row.results[0].metrics.noise_floor or {}
        n_test = row.results[0].dataset.n_test
        if is_number(bounds.get("n")) and bounds["n"] != n_test:
            cens = (f", {bounds['n_censored']} of them censored"
                    if is_number(bounds.get("n_censored")) else "")
            notes.append(f"*{row.label}* is scored on {bounds['n']} of the {n_test} test rows "
                         f"(the rows of {bounds['n_prompts']} prompts with at least two "
                         f"samples{cens}).")
    return [Text(note) for note in notes]


def _protocol_note(rows: list[Row]) -> list[Block]:
    """One line when results shown in the section (superseded ones aside) were scored under an
    earlier protocol, naming what changed since the oldest of them."""
    shown = list({id(r): r for row in rows for r in row.results}.values())
    old = earlier_protocol(shown)
    if not old:
        return []
    since = sorted({v for r in old for v in outdated_since(r)})
    changes = "; ".join(f"{PROTOCOL_CHANGES.get(v, 'its changes')} (protocol {v})"
                        for v in since)
    rescored = sum(not r.outdated("metrics.static") for r in old)
    partly = (f" {rescored} of them were rescored from their stored predictions, all but "
              "their decoding variants (whose predictions are not stored): only those rows keep "
              "the earlier figures." if rescored else "")
    return [Text(f"**Scored under an earlier protocol** ({len(old)} of {len(shown)} results, "
                 f"marked ‡): these figures were computed before {changes}; rerun the "
                 f"section's runs to rescore them.{partly}")]


def _section(dataset: str, model: str, ok: list[Result], out_dir: Path,
             written: set[Path], reference: str = DEFAULT_REFERENCE,
             fingerprint: str | None = None, split_by_fingerprint: bool = False,
             siblings: Sequence[list[Result]] = ()) -> tuple[World, Summary]:
    rows, superseded = build_rows(ok)
    heading = world_title(dataset, model, ok, fingerprint, split_by_fingerprint, siblings)
    lines = [Heading(2, heading), *_protocol_note(rows)]
    if split_by_fingerprint:
        lines.append(Text("**These results were scored on different labels from the other "
                          f"{dataset} / {model} table(s)** (another build of the data, or "
                          "results written before label fingerprints were recorded), so they "
                          "are kept apart."))

    def distinct(value: Callable[[Result], Any]) -> list[str]:
        vals = {str(value(r)) for r in ok}
        return sorted(v for v in vals if v != "None")

    info = []
    n_test = distinct(lambda r: r.dataset.n_test)
    n_prompts = distinct(lambda r: r.dataset.n_test_prompts)
    if n_test:
        info.append(f"test set: {' / '.join(n_test)} rows"
                    + (f" from {' / '.join(n_prompts)} prompts" if n_prompts else ""))
    ds_keys, model_keys = distinct(lambda r: r.dataset.key), distinct(lambda r: r.model.key)
    # one labels fingerprint: other dataset keys only took other paths to the same labels (a
    # source file installed anew, say), and the rows are scored on the same data
    same_labels = fingerprint is not None and all(r.labels_fingerprint == fingerprint for r in ok)
    if ds_keys:
        info.append("dataset key " + ", ".join(f"`{k}`" for k in ds_keys)
                    + (f" (the same labels, `{fingerprint[:8]}`)"
                       if same_labels and len(ds_keys) > 1 else ""))
    if model_keys:
        info.append("model key " + ", ".join(f"`{k}`" for k in model_keys))
    if fingerprint and split_by_fingerprint and fingerprint[:8] not in heading:
        info.append(f"labels `{fingerprint[:8]}`")
    # a shipped world's name and version tell two builds of one data set apart at a glance
    shipped = distinct(lambda r: (r.config.get("generation") or {}).get("shipped"))
    if shipped:
        info.append("shipped world " + ", ".join(f"`{k}`" for k in shipped))
    if info:
        text = "; ".join(info)
        lines.append(Text(text[0].upper() + text[1:] + ".", "provenance"))
    lines += provenance_blocks(ok)
    if (len(ds_keys) > 1 and not same_labels) or len(model_keys) > 1:
        lines.append(Text("**Warning:** these results come from more than one build of the data "
                          "set or model (several keys above); rows may not be comparable."))

    lines += _scoring_notes(ok, rows)
    table, ref_name = main_table(rows, reference)
    lines.append(table)
    family = family_note(table, ref_name)
    lines += family
    if superseded:
        lines.append(Text(f"{superseded} older result(s) for a predictor and seed already shown "
                          "were superseded by newer runs and are not counted."))
    lines.append(Caption("main", main_legend().replace("REF", ref_name or "the reference")))

    stem = f"{PLOT_PREFIX}{safe_name(dataset)}__{safe_name(model)}"
    if split_by_fingerprint:
        stem += f"__{safe_name((fingerprint or 'none')[:8])}"
    title = f"{dataset} / {model}"
    progress = out_dir / f"{stem}-progress.png"
    if progress_plot(rows, progress, title):
        written.add(progress)
        lines.append(Image(f"Dynamic MAE by progress, {title}", progress.name))
    scatter = out_dir / f"{stem}-scatter.png"
    if scatter_plot(rows, scatter, title):
        written.add(scatter)
        lines.append(Image(f"Predicted vs true length, {title}", scatter.name))

    lines += distributions_section(rows, out_dir, stem, written, title)
    lines += details_section(rows, reference)
    lines += scheduling_section(ok, out_dir, stem, written, title, reference)
    lines += transfer_section(ok, reference, MIN_RANKING_PROMPTS)
    world = World(heading, stem[len(PLOT_PREFIX):], lines, rows, ok, too_few_prompts(ok))
    front, unpaired = front_table(rows, table)
    if unpaired:
        family = [*family, Text("On the world's page only, as they cannot be paired with the "
                                "reference: " + ", ".join(cell_text(n) for n in unpaired) + ".")]
    return world, Summary(_summary_line(info[:1] + info[-1:] if shipped else info[:1], ok, rows),
                          front, family)


def _summary_line(info: list[str], ok: list[Result], rows: list[Row]) -> str:
    """The front page's line on a world: its test set, the shipped world it is, and a word where
    its rows need care (the world's page says why)."""
    warn = []
    if few := too_few_prompts(ok):
        warn.append(f"**too few test prompts to rank predictors** ({few} < {MIN_RANKING_PROMPTS})")
    if _protocol_note(rows):
        warn.append("some figures scored under an earlier protocol (‡)")
    text = "; ".join(info + warn) or "No test set recorded"
    return text[0].upper() + text[1:] + "."


def _test_prompts(world: World) -> int:
    return max((int(r.dataset.n_test_prompts) for r in world.results
                if is_number(r.dataset.n_test_prompts)), default=0)


def _newest(world: World) -> str:
    return max((r.created_at or "" for r in world.results), default="")


def _failed_lines(failed: list[Result], problems: list[str]) -> list[Block]:
    lines: list[Block] = [Heading(2, "Failed runs")]
    if not failed:
        lines.append(Text("None."))
    else:
        def key(r: Result) -> tuple[Any, ...]:
            return (r.dataset.name, r.model.name, r.predictor.name, r.seed, r.source)

        body = []
        for r in sorted(failed, key=key):
            err = r.error or ErrorInfo("?", "")
            first = (err.message.strip().splitlines() or [""])[0]
            body.append([cell_text(r.dataset.name), cell_text(r.model.name),
                         cell_text(r.predictor.name), str(r.seed),
                         cell_text(f"{err.type}: {first}"), f"`{cell_text(r.source)}`"])
        lines.append(Table(["Dataset", "Model", "Predictor", "Seed", "Error", "File"], body,
                           [LEFT] * 3 + [RIGHT, LEFT, LEFT]))
    if problems:
        lines += [Heading(3, "Invalid result files"),
                  Text("These files could not be read as results and are not in any table "
                       "above."), Items([cell_text(p) for p in problems])]
    return lines


def build_leaderboard(results_dir: str | Path, out_dir: str | Path,
                      reference: str = DEFAULT_REFERENCE, site: bool = True) -> Path:
    """Write ``out_dir/README.md`` and its plots from ``results_dir``; return the README path.

    README.md is the front page (the verdict, then each world's main table); each world's every
    table is on its ``world-<stem>.md`` and the captions are in ``glossary.md`` (pages.py). With
    `site`, also the web pages of the same tables (``index.html`` and one ``world-*.html`` per
    world, lenbench/leaderboard/site.py). Stale ``plot-*.png``, ``world-*.md`` (and, with `site`,
    ``world-*.html``) files from an earlier build are removed so that the folder matches the
    markdown exactly; no other file in ``out_dir`` is touched. `reference` names the predictor every
    other one is compared with, paired (the constant where it is absent).
    """
    return _build(results_dir, out_dir, reference, site)[0]


def _build(results_dir: str | Path | Sequence[str | Path], out_dir: str | Path,
           reference: str = DEFAULT_REFERENCE, site: bool = True
           ) -> tuple[Path, dict[str, int], list[str]]:
    folders = [results_dir] if isinstance(results_dir, str | Path) else list(results_dir)
    results_dir = folders[0]  # the result links start here (load_results_from)
    results, problems = load_results_from(folders)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    ok = [r for r in results if r.status == "ok"]
    failed = [r for r in results if r.status == "failed"]
    # one table per world and label fingerprint: results scored on other labels never mix
    by_pair: dict[tuple[str, str], dict[str, list[Result]]] = defaultdict(
        lambda: defaultdict(list))
    for r in ok:
        by_pair[(r.dataset.name, r.model.name)][r.labels_fingerprint or ""].append(r)

    intro: list[Block] = [
        Heading(1, "lenbench leaderboard"),
        Text(f"Built by `lenbench-leaderboard` from {len(results) + len(problems)} result "
             f"file(s): {len(ok)} ok, {len(failed)} failed, {len(problems)} invalid. "
             "Do not edit by hand; rebuild it from the results folder."),
    ]
    if not by_pair:
        intro.append(Text("No successful results yet."))
    written: set[Path] = set()
    sections: list[tuple[World, Summary]] = []
    with rendering_aside():  # the plots render in forks while the tables are built
        for dataset, model in sorted(by_pair):
            groups = by_pair[(dataset, model)]
            for fp in sorted(groups, key=lambda f: (f == "", f)):
                sections.append(_section(dataset, model, groups[fp], out, written, reference,
                                         fp or None, split_by_fingerprint=len(groups) > 1,
                                         siblings=[groups[f] for f in groups if f != fp]))
    sections.sort(key=lambda s: _newest(s[0]), reverse=True)
    # the largest first, the newest among equals
    sections.sort(key=lambda s: _test_prompts(s[0]), reverse=True)
    worlds = [world for world, _ in sections]
    for sampled, greedy in companion_pairs(worlds):  # the same prompts, greedy and sampled
        greedy.blocks.extend(greedy_beside_sampled(sampled, greedy))
    intro += verdict_blocks(worlds, out, written)  # the front page decides first
    failures = _failed_lines(failed, problems)

    for stale in out.glob(f"{PLOT_PREFIX}*.png"):
        if stale not in written:
            stale.unlink()
    readme = write_pages(out, intro, worlds, [summary for _, summary in sections], failures)
    if site:
        write_site(out, Path(results_dir), intro, worlds, failures)
    counts = {"ok": len(ok), "failed": len(failed), "invalid": len(problems)}
    return readme, counts, problems


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``lenbench-leaderboard``: rebuild the leaderboard from a results folder."""
    parser = argparse.ArgumentParser(
        prog="lenbench-leaderboard",
        description="Turn a folder of lenbench result JSON files into a markdown leaderboard "
                    "with plots, and the same tables as a web site: OUT/index.html (every world "
                    "side by side, filters) and one page per world, self-contained (opens from "
                    "file://, fetches nothing).")
    parser.add_argument("--results", action="append", default=None,
                        help="folder of result JSON files (default: "
                             f"{PathsConfig.results_dir}, where `lenbench` writes; the published "
                             "ones: leaderboard/results); give it again to put several folders "
                             "in one leaderboard, such as your runs beside the published ones")
    parser.add_argument("--out", default=PathsConfig.leaderboard_dir,
                        help="folder for README.md and plots (default: %(default)s; the "
                             "published leaderboard: leaderboard)")
    parser.add_argument("--reference", default=DEFAULT_REFERENCE,
                        help="predictor the others are compared with, paired over the same "
                             "test rows (default: %(default)s; the constant where absent)")
    parser.add_argument("--table", metavar="PATH",
                        help="also write every figure as one tidy CSV table (dataset, model, "
                             "labels, predictor, params, variant, seed, kind, status, "
                             "protocol_version, result, metric, value)")
    parser.add_argument("--no-site", action="store_true",
                        help="write README.md and plots only, not the web pages")
    args = parser.parse_args(argv)

    folders = [Path(f) for f in args.results or [PathsConfig.results_dir]]
    for results_dir in folders:
        if not results_dir.is_dir():
            print(f"lenbench-leaderboard: results folder '{results_dir}' does not exist. Run "
                  "`lenbench` first, or pass --results PATH to the folder holding the result "
                  "JSON files.", file=sys.stderr)
            return 2
    readme, counts, problems = _build(folders, args.out, args.reference, not args.no_site)
    for p in problems:
        print(f"warning: invalid result file {p}", file=sys.stderr)
    site = "" if args.no_site else f" and the site ({readme.parent / 'index.html'})"
    print(f"wrote {readme}, its plots{site} from {', '.join(map(str, folders))}: "
          f"{counts['ok']} ok, "
          f"{counts['failed']} failed, {counts['invalid']} invalid result file(s)")
    if args.table:
        from lenbench.leaderboard.table import results_table

        table = results_table(load_results_from(folders)[0])
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.table, index=False)
        print(f"wrote {args.table}: {len(table)} rows")
    return 0

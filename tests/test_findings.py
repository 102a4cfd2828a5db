"""docs/findings.md against the committed results: every claim recomputed, every number cited.

The checker (lenbench.leaderboard.claims) is tested here too, on the committed results and on
copies of them changed in a temporary folder, so that a table that stops supporting a sentence
is shown to fail the sentence that cites it.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from helpers.cli import REPO

from lenbench.leaderboard.claim_figures import FigureError, Figures, World
from lenbench.leaderboard.claims import (
    MARKER,
    blocks,
    check_document,
    check_text,
    excludes_zero,
    main,
    table_rows,
)

RESULTS = REPO / "leaderboard" / "results"
FINDINGS = REPO / "docs" / "findings.md"
SMOL = "sharegpt_wheel/smollm2-135m-instruct"
SMOL_V1 = f"{SMOL} labels=589166bd"  # the folder holds world v1's and v2's label sets
SMOL_V2 = f"{SMOL} labels=1a338e34"
WORLD = f"<!-- world: {SMOL_V1} -->\n"


@pytest.fixture(scope="module")
def figures() -> Figures:
    return Figures(RESULTS)


def _static_mae(figures: Figures, predictor: str) -> float:
    return figures.get(World.parse(SMOL_V1), predictor, "static.mae").value


def test_every_claim_of_the_findings_holds_and_every_number_is_cited():
    report = check_document(FINDINGS, RESULTS)
    assert report.claims >= 100  # the page cites its figures, not a handful of them
    assert not report.problems, "\n".join(report.problems)


def test_a_figure_written_as_the_table_rounds_it_holds_and_one_digit_off_fails(figures):
    mae = _static_mae(figures, "outlets")
    good = check_text(f"{WORLD}x <!-- check: outlets static.mae = {mae:.1f} -->", figures)
    bad = check_text(f"{WORLD}x <!-- check: outlets static.mae = {mae + 0.2:.1f} -->", figures)
    assert good.claims == 1 and not good.problems
    assert len(bad.problems) == 1
    assert f"outlets static.mae = {mae + 0.2:.1f}" in bad.problems[0]
    assert f"the results give {mae:.4g}" in bad.problems[0]


def test_an_interval_a_percentage_and_a_paired_difference_are_read_as_the_leaderboard_shows(
        figures):
    world = World.parse(SMOL_V1)
    score = figures.get(world, "mlp_quantile", "scheduling.score")
    assert score.ci is not None
    lo, hi = (100 * b for b in score.ci)
    text = (f"{WORLD}x <!-- check: mlp_quantile scheduling.score = {100 * score.value:.0f}% "
            f"[{lo:.0f}, {hi:.0f}] -->")
    assert not check_text(text, figures).problems
    wrong = text.replace(f"[{lo:.0f},", f"[{lo - 3:.0f},")
    assert "the results give the interval" in check_text(wrong, figures).problems[0]
    # the paired difference's mean is the difference of the two MAEs on the same rows
    delta = figures.paired(world, "outlets", "mlp_probe", "static.mae")
    assert delta.value == pytest.approx(
        _static_mae(figures, "outlets") - _static_mae(figures, "mlp_probe"))
    assert delta.ci is not None and delta.ci[0] < delta.value < delta.ci[1]


def test_a_claim_at_every_step_names_each_step_where_it_fails(figures):
    world = World.parse(SMOL_V1)
    steps = figures.steps(world, "outlets", "dynamic.mae_by_observed_steps")
    path = "dynamic.mae_by_observed_steps"
    worse = [t for t in steps if figures.get(world, "outlets", path, t).value
             > figures.get(world, "mlp_probe", path, t).value]
    assert worse and len(worse) < len(steps)  # the committed table has both kinds of step
    report = check_text(f"{WORLD}x <!-- check: outlets {path}@all < mlp_probe {path}@all -->",
                        figures)
    assert [int(re.search(r"at (\d+)", p).group(1)) for p in report.problems] == worse


def test_each_predictor_reads_every_predictor_of_the_world_that_has_the_figure(figures):
    world = World.parse(SMOL_V1)
    best = min(_static_mae(figures, p) for p in figures.predictors(world))
    text = f"{WORLD}x <!-- check: * static.mae >= mlp_probe static.mae -->"
    failing = check_text(text, figures).problems
    assert failing and all("(" in p for p in failing)  # each names its predictor
    assert f"{best:.4g} against" in "\n".join(failing)


def test_every_number_in_prose_needs_a_check_or_a_given_in_its_paragraph(figures):
    mae = _static_mae(figures, "outlets")
    cited = f"outlets errs {mae:.1f} tokens <!-- check: outlets static.mae = {mae:.1f} -->"
    assert not check_text(WORLD + cited, figures).problems
    # a number the paragraph's checks do not cite, even one cited in another paragraph
    loose = check_text(f"{WORLD}{cited}\n\nAgain {mae:.1f}, on 2 cores.", figures).problems
    assert {p.split(": ")[1].split()[0] for p in loose} == {f"{mae:.1f}", "2"}
    given = f"{WORLD}{cited}\n\nOn 2 cores.\n<!-- given: 2 (the machine) -->"
    assert not check_text(given, figures).problems
    # the sign may differ ("22.0 tokens better"), the digits written may not
    assert not check_text(f"{WORLD}-{mae:.1f} <!-- check: outlets static.mae = "
                          f"{mae:.1f} -->", figures).problems
    assert check_text(f"{WORLD}{mae:.2f} <!-- check: outlets static.mae = {mae:.1f} -->",
                      figures).problems


def test_markers_belong_to_their_list_item_and_code_links_and_headings_are_not_prose(figures):
    text = ("- first 1.5\n  <!-- given: 1.5 -->\n- second 2.5 `3.5` [x](a/4.5.md) y_{t+1}\n"
            "<!-- given:\n  2.5 -->\n\n# Heading 7\n")
    found = list(blocks(text))
    assert [b.line for b in found] == [1, 3, 7]
    assert [kind for kind, _ in MARKER.findall(found[0].text)] == ["given"]
    assert found[2].heading
    assert not check_text(text, figures).problems
    # the first item's given number does not carry over to the second item
    moved = text.replace("  <!-- given: 1.5 -->\n", "").replace("second", "second 1.5")
    assert [p.split(": ")[1] for p in check_text(moved, figures).problems] == \
        ["1.5 is cited by no check of its paragraph (nor listed as given)"] * 2


def test_an_unknown_figure_or_a_check_without_a_world_is_reported(figures):
    assert "no figure static.nope" in check_text(
        f"{WORLD}x <!-- check: outlets static.nope = 1 -->", figures).problems[0]
    assert "before any world" in check_text(
        "x <!-- check: outlets static.mae = 1 -->", figures).problems[0]
    assert "several label sets" in check_text(
        "<!-- world: toyworld/toy -->\nx <!-- check: mlp_probe static.mae = 1 -->",
        figures).problems[0]


def test_a_changed_result_fails_the_findings_claims_that_cite_it(tmp_path, capsys, figures):
    """A copy of the committed results with two figures changed: the checker names every claim
    of docs/findings.md that cites them, and the command line exits 1."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    source = next((results / SMOL / "outlets").glob("*.json"))
    data = json.loads(source.read_text())
    static, dynamic = data["metrics"]["static"], data["metrics"]["dynamic"]
    written = f"outlets static.mae = {static['mae']:.1f}"  # as the page cites it
    static["mae"] += 10.0
    # at the last listed step, outlets now errs more than the probe
    path = "dynamic.mae_by_observed_steps"
    last = dynamic["observed_steps"][-1]
    probe = figures.get(World.parse(SMOL_V1), "mlp_probe", path, last).value
    dynamic["mae_by_observed_steps"][-1] = probe + 5.0
    source.write_text(json.dumps(data))
    claims = [c.strip() for kind, body in MARKER.findall(FINDINGS.read_text())
              if kind == "check" for c in " ".join(body.split()).split(";")]
    citing = [c for c in claims if c == written]
    ordering = f"outlets {path}@{last} < mlp_probe {path}@{last}"  # the SmolLM2 world's
    assert citing and ordering in claims, "docs/findings.md cites both figures"
    assert main([str(FINDINGS), "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert all(f"'{c}': the results give {static['mae']:.4g}" in out for c in citing), out
    assert f"'{ordering}' (at {last}): the results give {probe + 5:.4g} against {probe:.4g}" \
        in out, out


def test_a_changed_number_in_the_findings_fails_its_claim_and_its_citation(figures):
    text = FINDINGS.read_text()
    claim = re.search(r"outlets static\.mae = (\d+\.\d)", text)
    assert claim, "docs/findings.md cites outlets' static MAE"
    written = claim.group(1)
    changed = f"{float(written) + 1:.1f}"
    in_check = text[:claim.start(1)] + changed + text[claim.end(1):]
    problems = check_text(in_check, figures, "findings.md").problems
    assert any(f"'outlets static.mae = {changed}': the results give" in p for p in problems)
    # the prose keeps the old number, which no check of its paragraph cites any more
    assert any(f": {written} is cited by no check" in p for p in problems)


def test_the_command_line_prints_each_problem_and_a_summary(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"{WORLD}It errs 1.0 tokens.\n<!-- check: outlets static.mae = 1.0 -->\n")
    assert main([str(doc), "--results", str(RESULTS)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("doc.md:3: 'outlets static.mae = 1.0': the results give")
    assert out[-1] == "1 claims checked, 1 problems"
    assert Path(doc).read_text().startswith(WORLD)  # the checker never writes the document


def test_the_contributing_guide_example_is_checked_as_written(figures):
    guide = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = guide.split("## Write about the results", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```markdown\n(.*?)```", section, re.S)
    assert example, "CONTRIBUTING.md shows a marked paragraph"
    report = check_text(example.group(1), figures)
    assert report.claims >= 5 and not report.problems, report.problems


def test_a_figures_spread_over_seeds_is_each_seeds_result_read_alone(figures):
    world = World.parse(SMOL_V2)
    runs = figures.results_of(world, "mlp_probe")
    assert len(runs) >= 3
    each = [r.metrics.static["mae"] for r in runs]
    spread = figures.get(world, "mlp_probe", "static.mae.seed_std").value
    assert spread == pytest.approx(statistics.stdev(each)) and spread > 0
    with pytest.raises(FigureError, match="no spread"):
        figures.get(World.parse(SMOL_V2), "noise_floor", "static.mae.seed_std")


V2 = f"<!-- world: {SMOL_V2} -->\n"
TRANSFER_LOSS = "* transfer.metrics.static.mae - * static.mae"


def _every_row(figures: Figures, world: str, path: str) -> dict[str, float]:
    """Each row of the world's table that has the figure, read one by one."""
    out = {}
    for name in table_rows(World.parse(world), figures):
        predictor, _, variant = name.partition("/")
        with contextlib.suppress(FigureError):
            out[name] = figures.get(World.parse(world), predictor, path, None, variant).value
    return out


def test_best_is_checked_against_every_row_of_the_table_variants_included(figures):
    maes = _every_row(figures, SMOL_V2, "static.mae")
    assert any("/" in name for name in maes), "the section's table has variant rows"
    best, second = sorted(maes, key=maes.get)[:2]
    good = check_text(f"{V2}x <!-- check: lowest * static.mae: {best}, {second} -->", figures)
    assert good.claims == 1 and not good.problems, good.problems
    # a planted "best" that one row beats: the row that beats it is named, with its figure
    planted = check_text(f"{V2}x <!-- check: lowest * static.mae: {second} -->", figures)
    assert len(planted.problems) == 1
    assert f"{best} gives {maes[best]:.4g} against {second}'s {maes[second]:.4g}" \
        in planted.problems[0]
    # the runner-up named first: out of order, though both are the two lowest
    assert check_text(f"{V2}x <!-- check: lowest * static.mae: {second}, {best} -->",
                      figures).problems
    worst = max(maes, key=maes.get)
    assert not check_text(f"{V2}x <!-- check: highest * static.mae: {worst} -->",
                          figures).problems


def test_more_than_the_others_fails_for_the_one_predictor_that_loses_more(figures):
    """The transfer paragraph of world v2 once said OUTLETS loses more than the others."""
    transfer = _every_row(figures, SMOL_V2, "transfer.metrics.static.mae")
    static = _every_row(figures, SMOL_V2, "static.mae")
    loss = {name: transfer[name] - static[name] for name in transfer}
    assert len(loss) >= 8 and "outlets" in loss
    ahead = [name for name in loss if loss[name] > loss["outlets"]]
    assert ahead, "a predictor of the committed table loses more than outlets"
    planted = check_text(f"{V2}OUTLETS loses more than the others.\n"
                         f"<!-- check: highest {TRANSFER_LOSS}: outlets -->", figures)
    assert sorted(re.search(r"': (\S+) gives", p).group(1) for p in planted.problems) == \
        sorted(ahead)
    order = sorted(loss, key=loss.get, reverse=True)
    rank = order.index("outlets")
    true = f"highest {TRANSFER_LOSS}: {', '.join(order[:rank + 1])}"
    assert not check_text(f"{V2}x <!-- check: {true} -->", figures).problems


def test_separation_is_the_tables_rule_and_none_separates_names_the_pair_that_does(figures):
    """`separated` holds where the paired 95% interval excludes 0, as the table bolds a Δ."""
    world = World.parse(SMOL_V2)
    four = ["mlp_probe", "tfidf_ridge", "egtp", "bert_regressor"]
    apart = set()
    for a in four:
        for b in four:
            if a == b:
                continue
            ci = figures.paired(world, a, b, "static.mae").ci
            assert ci is not None
            claim = f"separated {a} vs {b} static.mae"
            held = not check_text(f"{V2}x <!-- check: {claim} -->", figures).problems
            assert held == excludes_zero(ci) == (ci[0] > 0 or ci[1] < 0)
            negated = not check_text(f"{V2}x <!-- check: not {claim} -->", figures).problems
            assert negated != held
            if held:
                apart.add(frozenset((a, b)))
    assert apart and len(apart) < 6  # the four hold both kinds of pair
    group = ",".join(four)
    planted = check_text(f"{V2}None of the four separates.\n<!-- check: not separated "
                         f"{group} vs {group} static.mae -->", figures)
    named = {frozenset(re.search(r"\((\S+) vs (\S+)\)", p).groups())
             for p in planted.problems}
    assert named == apart
    rest = sorted(set(four) - set().union(*apart))
    others = ",".join(rest + [sorted(apart.pop())[0]])
    assert not check_text(f"{V2}x <!-- check: not separated {others} vs {others} static.mae -->",
                          figures).problems


def test_a_comparison_of_the_findings_fails_when_one_row_of_its_table_contradicts_it(tmp_path):
    """world v1's best static predictor: give `constant` a lower MAE and the findings' ranking
    claim names it, although no sentence mentions `constant` beside it."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    claim = "lowest * static.mae: mlp_quantile"
    assert claim in " ".join(FINDINGS.read_text().split())
    source = next((results / SMOL / "constant").glob("*-589166bd.json"))
    data = json.loads(source.read_text())
    data["metrics"]["static"]["mae"] = 50.0
    source.write_text(json.dumps(data))
    problems = check_document(FINDINGS, results).problems
    assert any(f"'{claim}': constant gives 50 against mlp_quantile's" in p for p in problems), \
        problems


def test_a_predicate_that_does_not_compare_several_predictors_is_reported(figures):
    for claim, why in [("lowest outlets static.mae: outlets", "of several predictors"),
                       ("lowest * static.mae", "a ranking is"),
                       ("separated outlets static.mae", "of a pair"),
                       ("lowest * static.mae: nobody", "no figure for nobody"),
                       ("separated outlets vs mlp_probe static.c_index", "no interval")]:
        problems = check_text(f"{WORLD}x <!-- check: {claim} -->", figures).problems
        assert len(problems) == 1 and why in problems[0], (claim, problems)


def test_a_one_seed_side_is_never_separated_as_the_table_never_bolds_it(figures):
    """OUTLETS has one seed on world v2: its interval against mlp_probe excludes 0 over the
    prompts, but the table does not bold it, and `separated` says what the table says."""
    fig = figures.paired(World.parse(SMOL_V2), "outlets", "mlp_probe", "static.mae")
    assert excludes_zero(fig.ci) and min(fig.seeds) == 1
    planted = check_text(f"{V2}OUTLETS is separated from the probe.\n"
                         "<!-- check: separated outlets vs mlp_probe static.mae -->", figures)
    assert len(planted.problems) == 1 and "one seed on a side" in planted.problems[0]
    assert not check_text(f"{V2}x <!-- check: not separated outlets vs mlp_probe static.mae -->",
                          figures).problems


def test_predictors_alone_leave_the_decoding_variants_out(figures):
    maes = _every_row(figures, SMOL_V2, "static.mae")
    mains = {name: v for name, v in maes.items() if "/" not in name}
    best_row, best_main = min(maes, key=maes.get), min(mains, key=mains.get)
    assert "/" in best_row, "a decoding variant has the lowest MAE of world v2's table"
    assert not check_text(f"{V2}x <!-- check: lowest *predictors static.mae: {best_main} -->",
                          figures).problems
    assert check_text(f"{V2}x <!-- check: lowest * static.mae: {best_main} -->",
                      figures).problems


def test_a_variant_pairs_by_its_stored_rows_and_the_gain_parts_add_up(figures):
    """`bin_classifier/median vs mlp_probe static.mae` is the table's Δ of the median row, and
    the parts from the rows that ended and from the censored ones sum to the whole Δ."""
    world = World.parse(SMOL_V2)
    whole = figures.paired(world, "bin_classifier/median", "constant", "static.mae")
    ended = figures.paired(world, "bin_classifier/median", "constant", "static.mae.ended")
    capped = figures.paired(world, "bin_classifier/median", "constant", "static.mae.capped")
    assert abs(ended.value + capped.value - whole.value) < 1e-9
    assert whole.value != figures.paired(world, "bin_classifier", "constant", "static.mae").value
    text = f"{whole.value:+.1f}"
    held = check_text(f"{V2}x <!-- check: bin_classifier/median vs constant static.mae = "
                      f"{text} -->", figures)
    assert not held.problems, held.problems
    planted = check_text(f"{V2}x <!-- check: bin_classifier/median vs constant "
                         f"static.mae.capped = {capped.value + 1:+.1f} -->", figures)
    assert len(planted.problems) == 1
    with pytest.raises(FigureError, match="variant"):
        figures.paired(world, "bin_classifier/median", "constant", "dynamic.mae")


def test_the_leaderboards_which_predictor_when_holds_against_the_committed_results(figures):
    """The verdict's sentences in leaderboard/README.md cite figures of the committed results;
    each must hold, and naming another predictor as the most accurate fails."""
    from lenbench.leaderboard.verdict import which_predictor_when

    text = which_predictor_when((REPO / "leaderboard" / "README.md").read_text(encoding="utf-8"))
    report = check_text(text, figures)
    assert report.claims >= 4 and not report.problems, report.problems
    best = re.search(r"lowest \* static\.mae: (\S+?)[;\s]", text).group(1)
    planted = text.replace(f"lowest * static.mae: {best}", "lowest * static.mae: constant", 1)
    assert check_text(planted, figures).problems

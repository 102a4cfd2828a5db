"""One-line notes on the site's column headers and the titles of its glossary entries.

A header's tooltip says in a line what the column holds; the full caption (the markdown's text
under the table) is in the page's glossary, linked from the header. Notes are short on purpose:
the caption stays the one place that defines a figure. The main table's metric columns take
theirs from their specs (metric_specs.py), so a new metric's header gets its note with it.
"""

from __future__ import annotations

from lenbench.leaderboard.metric_specs import spec_note

CAPTION_TITLES = {
    "main": "Main table",
    "distributions": "Distributions",
    "observed_steps": "Dynamic MAE by observed steps",
    "fixed_population": "Dynamic MAE over one population",
    "speculative": "Speculative decoding quality",
    "scheduling": "Scheduling",
    "scheduling_comparison": "Scheduling comparison",
    "scheduling_alpha": "The starvation guard: score by aging weight",
    "scheduling_sweep": "Value of prediction by load",
    "dynamic_steps": "Dynamic error by step, paired",
    "transfer": "Transfer",
    "greedy_beside_sampled": "Greedy beside sampled",
    "verdict": "Verdict",
    "index": "Overview",
}

COLUMN_NOTES = {
    "Predictor": "the predictor (and its reading); markers after the name: see the glossary",
    "Seeds": "number of seeds pooled in the row",
    "Rows (censored)": "rows scored, and how many of them were cut at the length cap",
    "Mean pinball": "pinball loss averaged over five quantile levels, tokens",
    "CRPS": "threshold-weighted continuous ranked probability score, tokens (lower is better)",
    "Δ CRPS vs siblings": "CRPS minus the sibling reference's on the same rows, paired",
    "50% coverage": "share of true lengths inside the central 50% interval",
    "50% width": "mean width of the central 50% interval, tokens",
    "80% coverage": "share of true lengths inside the central 80% interval",
    "80% width": "mean width of the central 80% interval, tokens",
    "P(≥ cap) AUC": "AUC of the predicted P(L ≥ cap) for answers that reached the cap",
    "Dyn. CRPS": "CRPS of the remaining-length distributions over decoding steps",
    "Dyn. 80% coverage": "coverage of the remaining-length 80% intervals",
    "Score [95% CI]": "share of the oracle's latency gain over FCFS this predictor reaches, "
                      "at most all of it",
    "All mean": "change of the mean end-to-end latency of all requests against the baseline",
    "Capped mean": "change of the mean end-to-end latency of requests cut at the length cap",
    "Short mean": "change of the short requests' mean end-to-end latency against the baseline",
    "Short P90": "change of the short requests' P90 end-to-end latency against the baseline",
    "Short P99": "change of the short requests' P99 end-to-end latency against the baseline",
    "Long mean": "change of the long requests' mean end-to-end latency against the baseline",
    "Long P99": "change of the long requests' P99 end-to-end latency against the baseline",
    "Runs": "predictor seeds pooled in the row",
    "Policy": "the scheduling policy the predictions drive",
    "Preemptions / request": "mean preemptions per request, over runs and simulator seeds",
    "ms/step": "the predictor's own latency per decoding step, milliseconds",
    "τ": "mean acceptance length: tokens per drafting round",
    "Transfer MAE": "static MAE on the transfer set, tokens",
    "In-world MAE": "the same runs' static MAE on this world's test split",
    "Change": "transfer minus in-world MAE (positive: worse on the other prompt set)",
    "In-world dynamic MAE": "the same runs' dynamic MAE on this world's test split",
    "Entry": "a figure the predictor reported about itself",
    "Value": "its value: mean ± std over seeds for numbers",
    "Kind": "what the predictor predicts: static totals, dynamic remaining lengths, "
            "distributions; references are not predictors",
    "Gain: ended / capped": "the MAE gain over the constant from the rows that ended and from "
                            "the censored rows, tokens per test row",
    "Tier": "accuracy tier from the paired tests: 1 is the most accurate group",
    "Serving gain": "seconds cut from FCFS's mean latency at the headline load, and the share",
    "Training": "training time where the results were made",
    "Use it when": "when this predictor is the one to use, in plain words",
    "MAE sampled": "static MAE on the sampled world, tokens (mean ± std over seeds)",
    "MAE greedy": "static MAE on the same prompts answered greedily, tokens",
    "Share of gap sampled": "share of the constant-to-floor gap closed on the sampled world",
    "Share of gap greedy": "share of the constant's MAE closed on the greedy world (floor 0)",
    "C-index sampled": "Harrell's C on the sampled world, mean over seeds",
    "C-index greedy": "Harrell's C on the greedy world, mean over seeds",
    "Seeds (sampled / greedy)": "seeds pooled in each world's row",
}

PREFIX_NOTES = (
    ("Score Δ vs ", "score minus the reference predictor's on the same draws, in points, "
                    "paired; bold where the 95% interval excludes 0"),
    ("α = ", "the scheduling score with the aging guard at this weight, quantiles per second"),
    ("Δ t = ", "remaining-length error minus the reference's at this step, on one population "
               "of requests, paired"),
    ("Δ vs ", "MAE minus the reference predictor's on the same test rows, paired; bold where "
              "the 95% interval excludes 0 and both sides have several seeds (° one seed)"),
    ("Dyn. Δ vs ", "dynamic MAE minus the reference predictor's, paired"),
    ("t = ", "remaining-length MAE at exactly this many generated tokens"),
    ("α_", "acceptance rate at this draft depth"),
    ("acc_", "offline top-1 agreement of the draft with the target at this depth"),
    ("E[acc]_", "expected acceptance at this depth"),
    ("mean ", "mean over draft depths"),
)


def column_note(header: str) -> str:
    """The one-line note of a column header ('' when there is none)."""
    if note := spec_note(header):
        return note
    if header in COLUMN_NOTES:
        return COLUMN_NOTES[header]
    return next((note for prefix, note in PREFIX_NOTES if header.startswith(prefix)), "")

"""Prediction-driven serving simulator: score length predictors by their effect on scheduling.

Entry point for the evaluation pipeline: `simulate_predictions`, and `compare_policies` for
preemptive (queue srpt) and distributional rows on the same draws. Building blocks: `Workload`
(requests), `SimConfig` (every parameter), `simulate` (one run), `run_figures` (its metrics),
`RemainingEstimates` (dynamic remaining-length estimates for srpt), time models
(`TableTimeModel`, `LinearTimeModel`, `calibrate`) and reference predictors.
Needs numpy only; the plots import matplotlib lazily.
"""

from lenbench.sim.capacity import capacity, resolve_qps, saturation_qps
from lenbench.sim.comparison import compare_policies, distribution_key
from lenbench.sim.config import SCORE_METRICS, SimConfig
from lenbench.sim.evaluate import load_sweep, noisy_oracle_sweep, simulate_predictions
from lenbench.sim.metrics import (
    aggregate,
    captured_share,
    hol_inversion_rate,
    kendall_tau,
    ratio_interval,
    request_metrics,
    run_figures,
    throughput,
)
from lenbench.sim.predictors import constant, noisy_oracle, one_bit, oracle, random_permutation
from lenbench.sim.remaining import RemainingEstimates
from lenbench.sim.result import SimResult
from lenbench.sim.run import simulate
from lenbench.sim.timing import (
    A100_LLAMA3_8B,
    H100_LLAMA3_8B,
    LinearTimeModel,
    TableTimeModel,
    TimeModel,
    calibrate,
    get_time_model,
)
from lenbench.sim.workload import (
    Workload,
    arrival_times,
    draw_workload,
    load_azure_trace,
    lognormal_lengths,
    short_prompts,
)

__all__ = [
    "A100_LLAMA3_8B",
    "H100_LLAMA3_8B",
    "SCORE_METRICS",
    "LinearTimeModel",
    "RemainingEstimates",
    "SimConfig",
    "SimResult",
    "TableTimeModel",
    "TimeModel",
    "Workload",
    "aggregate",
    "arrival_times",
    "calibrate",
    "capacity",
    "captured_share",
    "compare_policies",
    "constant",
    "distribution_key",
    "draw_workload",
    "get_time_model",
    "hol_inversion_rate",
    "kendall_tau",
    "load_azure_trace",
    "load_sweep",
    "lognormal_lengths",
    "noisy_oracle",
    "noisy_oracle_sweep",
    "one_bit",
    "oracle",
    "random_permutation",
    "ratio_interval",
    "request_metrics",
    "resolve_qps",
    "run_figures",
    "saturation_qps",
    "short_prompts",
    "simulate",
    "simulate_predictions",
    "throughput",
]

"""The outcome of one simulation run: per-request timestamps aligned with the workload."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from lenbench.sim.workload import Workload


@dataclass
class SimResult:
    """Per-request timestamps (seconds) of one run, aligned with the workload's arrays.

    `first_token_s` is the end of prefill; `kv_ready_s` the KV cache's arrival at the decode
    side (= dispatch); `admit_s` the admission into a decode batch; `admit_seq` the global
    order of admissions; `generated` the tokens each request actually produced (1 from prefill
    plus one per decode iteration it ran). Requests with true_len == 1 finish at prefill
    (instance -1, NaN KV and admission times). Under a preemptive queue (srpt) `admit_s` and
    `admit_seq` are the first admission and `preemptions` counts each request's evictions
    (zeros for the other queues).
    """

    workload: Workload
    policy: str
    first_token_s: NDArray[np.float64]
    kv_ready_s: NDArray[np.float64]
    admit_s: NDArray[np.float64]
    done_s: NDArray[np.float64]
    instance: NDArray[np.int64]
    admit_seq: NDArray[np.int64]
    generated: NDArray[np.int64]
    instance_stats: list[dict[str, float]]
    timeline: NDArray[np.float64] | None = field(default=None, repr=False)
    preemptions: NDArray[np.int64] | None = None

    @property
    def e2e_s(self) -> NDArray[np.float64]:
        return self.done_s - self.workload.arrival_s

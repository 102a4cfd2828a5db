"""A result file as typed objects, so that every reader names the fields it uses.

`Result` holds the stable parts of the schema (lenbench/results/__init__.py) as attributes: the
identity (dataset, model, predictor, seed, status, kind), the versions, the fingerprints of the
data scored, the error of a failed run, the timings and the blocks of figures. The parts that are
free-form stay mappings: each block of metrics (a metric added to scoring appears in its block
with no change here), the predictor's report, the simulator's record, the config and the
environment. `Result.from_mapping` brings an older layout up to date first
(lenbench/results/upgrade.py), so every attribute below is there whatever wrote the file; files
are read through lenbench/results/loading.py, which checks them before that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lenbench.results.upgrade import upgrade
from lenbench.results.versions import changed_since

__all__ = ["DatasetInfo", "DistributionScores", "ErrorInfo", "Fingerprints", "Metrics",
           "ModelInfo", "PredictorInfo", "Predictions", "Result", "Timings", "Transfer"]

Block = Mapping[str, Any]


def _block(value: Any) -> Block | None:
    return value if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class DatasetInfo:
    """The prompt set a result was scored on, and the size of its splits."""

    name: str
    key: str | None = None
    n_train: int | None = None
    n_val: int | None = None
    n_test: int | None = None
    n_test_prompts: int | None = None
    mean_L: float | None = None  # noqa: N815 - the file's own name for the mean length

    @classmethod
    def from_mapping(cls, d: Block) -> DatasetInfo:
        return cls(d["name"], d.get("key"), d.get("n_train"), d.get("n_val"), d.get("n_test"),
                   d.get("n_test_prompts"), d.get("mean_L"))


@dataclass(frozen=True)
class ModelInfo:
    """The target model; `source` says where its weights came from when they were converted."""

    name: str
    key: str | None = None
    source: Block | None = None

    @classmethod
    def from_mapping(cls, d: Block) -> ModelInfo:
        return cls(d["name"], d.get("key"), _block(d.get("source")))


@dataclass(frozen=True)
class PredictorInfo:
    """The predictor as configured: its name, class, arguments and whether it scored steps."""

    name: str
    target: str | None = None
    params: Block = field(default_factory=dict)
    dynamic: bool = False
    reads_next_token: bool = False  # at step t it reads y_{t+1}: one token more than a probe
    reads: Block | None = None  # what it reads: text, target_states, target_model (None: older)

    @classmethod
    def from_mapping(cls, d: Block) -> PredictorInfo:
        reads = d.get("reads")
        return cls(d["name"], d.get("target"), d.get("params") or {}, bool(d.get("dynamic")),
                   bool(d.get("reads_next_token")), reads if isinstance(reads, dict) else None)


@dataclass(frozen=True)
class ErrorInfo:
    """Why a run (or its transfer scores) failed."""

    type: str | None
    message: str
    traceback: str | None = None

    @classmethod
    def from_mapping(cls, d: Block) -> ErrorInfo:
        return cls(d.get("type"), str(d.get("message", "")), d.get("traceback"))


@dataclass(frozen=True)
class Fingerprints:
    """Content hashes of the labels and features scored (lenbench.scoring.fingerprints)."""

    labels: str | None = None
    features: str | None = None

    @classmethod
    def from_mapping(cls, d: Block) -> Fingerprints:
        return cls(d.get("labels"), d.get("features"))


@dataclass(frozen=True)
class DistributionScores:
    """Scores of predicted length distributions: totals and remaining lengths, each a block."""

    static: Block | None = None
    dynamic: Block | None = None


@dataclass(frozen=True)
class Metrics:
    """The figures of a run, one free-form block per reading: `static` (total lengths),
    `dynamic` (remaining lengths), `variants` (a predictor's other readings, each a static
    block), `distribution` and, for the noise floor, its bounds."""

    static: Block | None = None
    dynamic: Block | None = None
    variants: Mapping[str, Block] = field(default_factory=dict)
    distribution: DistributionScores | None = None
    noise_floor: Block | None = None

    @classmethod
    def from_mapping(cls, d: Block | None) -> Metrics:
        if not isinstance(d, Mapping):  # a failed run has none
            return cls()
        dist = d.get("distribution")
        return cls(_block(d.get("static")), _block(d.get("dynamic")), d.get("variants") or {},
                   DistributionScores(_block(dist.get("static")), _block(dist.get("dynamic")))
                   if isinstance(dist, Mapping) and dist else None,
                   _block(d.get("noise_floor")))


@dataclass(frozen=True)
class Timings:
    """Seconds to fit and predict, milliseconds per request and per step, parameter count."""

    fit_s: float | None = None
    predict_s: float | None = None
    predict_ms_per_request: float | None = None
    predict_ms_per_step: float | None = None
    n_parameters: int | None = None

    @classmethod
    def from_mapping(cls, d: Block | None) -> Timings:
        d = d if isinstance(d, Mapping) else {}
        return cls(*(d.get(f.name) for f in dataclasses.fields(cls)))

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of every timing, sorted by name as the file stores them."""
        return sorted((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))


@dataclass(frozen=True)
class Predictions:
    """The scored rows, in order: true and predicted lengths, and what the file has beside them
    (None where it predates a column or the predictor has no such reading)."""

    true: list[Any]
    pred: list[Any]
    prompt_id: list[Any] | None = None
    censored: list[Any] | None = None
    dynamic_error: list[Any] | None = None  # per request; null where no step was scored
    quantile_levels: list[Any] | None = None
    quantiles: list[Any] | None = None
    crps: list[Any] | None = None
    pit: list[Any] | None = None
    p_cap: list[Any] | None = None  # each row's predicted P(L >= cap)
    prompt_len: list[Any] | None = None  # prompt tokens per row: the simulator's traffic
    # {"t": listed steps, "error": per row, |(L - t) - r_t| at each t, null where not decoding}
    dynamic_steps: Mapping[str, Any] | None = None
    variants: Mapping[str, list[Any]] | None = None  # each decoding variant's predictions

    @classmethod
    def from_mapping(cls, d: Block | None) -> Predictions | None:
        if not isinstance(d, Mapping):
            return None
        return cls(d.get("true") or [], d.get("pred") or [],
                   *(d.get(f.name) for f in dataclasses.fields(cls)[2:]))

    def decoded(self, variant: str) -> Predictions | None:
        """These rows as the decoding `variant` predicts them: its stored predictions, or for
        "median" the stored 0.5 quantile of the predicted distribution (clipped to [1, cap] as
        scored); None where the file has neither."""
        values = (self.variants or {}).get(variant)
        levels = list(self.quantile_levels or [])
        if values is None and variant == MEDIAN_VARIANT and 0.5 in levels and self.quantiles:
            at = levels.index(0.5)
            values = [q[at] for q in self.quantiles]
        if values is None or len(values) != len(self.true):
            return None
        return dataclasses.replace(self, pred=list(values))


MEDIAN_VARIANT = "median"  # the point a distribution predictor's median decoding gives


@dataclass(frozen=True)
class Transfer:
    """The fitted predictor scored on a second prompt set (lenbench.transfer): both sets'
    identities, and the scores or the error that stopped them."""

    trained_on: Block
    scored_on: Block
    metrics: Metrics | None = None
    predictions: Predictions | None = None
    error: ErrorInfo | None = None

    @classmethod
    def from_mapping(cls, d: Block | None) -> Transfer | None:
        if not isinstance(d, Mapping):
            return None
        error = d.get("error")
        return cls(d.get("trained_on") or {}, d.get("scored_on") or {},
                   Metrics.from_mapping(d["metrics"]) if isinstance(d.get("metrics"), Mapping)
                   else None, Predictions.from_mapping(d.get("predictions")),
                   ErrorInfo.from_mapping(error) if isinstance(error, Mapping) and error
                   else None)


@dataclass(frozen=True, eq=False)
class Result:
    """One run's result. `source` is the file's path under its results folder ('' for a result
    built in memory); `extra` holds top-level fields the schema leaves free."""

    schema_version: int
    protocol_version: int
    status: str  # "ok" | "failed"
    kind: str  # "predictor" | "reference"
    dataset: DatasetInfo
    model: ModelInfo
    predictor: PredictorInfo
    seed: int
    config_hash: str
    created_at: str
    fingerprints: Fingerprints | None  # None: written before the data was fingerprinted
    report: Block
    metrics: Metrics = field(default_factory=Metrics)
    timings: Timings = field(default_factory=Timings)
    error: ErrorInfo | None = None
    predictions: Predictions | None = None
    scheduling: Block | None = None
    transfer: Transfer | None = None
    causality: Block | None = None  # the audit of what was scored (lenbench.scoring.audit)
    generation: Block = field(default_factory=dict)  # how the labels were made
    stage_keys: Block = field(default_factory=dict)
    config: Block = field(default_factory=dict)
    environment: Block = field(default_factory=dict)
    git: Block = field(default_factory=dict)
    source: str = ""
    extra: Block = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Block, source: str = "") -> Result:
        """The result a mapping holds, in any layout this lenbench reads (upgraded first)."""
        d = upgrade(data)
        known = {f.name for f in dataclasses.fields(cls)} - {"source", "extra"}
        error, fingerprints = d.get("error"), d["fingerprints"]
        return cls(
            schema_version=d["schema_version"], protocol_version=d["protocol_version"],
            status=d["status"], kind=d["kind"], dataset=DatasetInfo.from_mapping(d["dataset"]),
            model=ModelInfo.from_mapping(d["model"]),
            predictor=PredictorInfo.from_mapping(d["predictor"]), seed=d["seed"],
            config_hash=d["config_hash"], created_at=d["created_at"],
            fingerprints=Fingerprints.from_mapping(fingerprints)
            if isinstance(fingerprints, Mapping) and fingerprints else None,
            report=d["report"] if isinstance(d["report"], Mapping) else {},
            metrics=Metrics.from_mapping(d.get("metrics")),
            timings=Timings.from_mapping(d.get("timings")),
            error=ErrorInfo.from_mapping(error) if isinstance(error, Mapping) and error else None,
            predictions=Predictions.from_mapping(d.get("predictions")),
            scheduling=_block(d.get("scheduling")), transfer=Transfer.from_mapping(
                d.get("transfer")), causality=_block(d.get("causality")),
            generation=d.get("generation") or {}, stage_keys=d.get("stage_keys") or {},
            config=d.get("config") or {}, environment=d.get("environment") or {},
            git=d.get("git") or {}, source=source,
            extra={k: v for k, v in d.items() if k not in known})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def labels_fingerprint(self) -> str | None:
        """The labels' fingerprint: results with different ones were scored on other data."""
        return self.fingerprints.labels if self.fingerprints else None

    @property
    def kept_protocols(self) -> dict[str, int]:
        """The blocks (e.g. "metrics.variants") that a rescoring to this protocol could not
        recompute from the stored predictions, each with the protocol its figures are from ({}
        for a result as its run wrote it; lenbench/results/rescore.py)."""
        kept = self.extra.get("rescored")
        kept = kept.get("kept") if isinstance(kept, Mapping) else None
        if not isinstance(kept, Mapping):
            return {}
        return {str(k): int(v) for k, v in kept.items()
                if isinstance(v, int) and not isinstance(v, bool)}

    def block_protocol(self, block: str) -> int:
        """The protocol the figures of `block` ("metrics.static", "metrics.variants", ...) were
        computed under."""
        return self.kept_protocols.get(block, self.protocol_version)

    def outdated(self, block: str) -> list[int]:
        """The protocols since `block`'s figures were computed that changed its rules ([] when
        they are current: a later protocol may have changed other parts only)."""
        return changed_since(block, self.block_protocol(block))

    @property
    def audit_failed(self) -> bool:
        """Whether the audit of what was scored found a value that moved when what the protocol
        hides from it changed (absent audits, in older files, are not failures)."""
        return self.causality is not None and self.causality.get("passed") is False

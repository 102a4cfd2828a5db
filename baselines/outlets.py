"""OUTLETS and its ablations as lenbench predictors (arXiv 2609.01068).

variant    | backbone trained with            | length head
outlets    | L_SD + 0.1 L_len + 1e-5 ||head||² | joint, on the draft state at TTT step 0
lp_only    | 0.1 L_len + 1e-5 ||head||²        | joint (no drafting loss)
sd_only    | L_SD                              | fitted afterwards on the frozen backbone
no_decoder | (no draft layer) fc only          | on fc(fused target features)

`attention: llama` gives plain EAGLE-3 attention; `gate: headwise` one gate per head.
Static prediction: the draft state at the last prompt position, whose token input is y_1 (the
token the target sampled from the prefill logits): the state EAGLE-3 has right after prefill.
Dynamic prediction: the same at position n-1+t, from one teacher-forced pass over the response.
Training reads the target's features and teacher from a disk cache built in one target pass
(`train.target_cache`), kept in the harness's cache folder and reused by every variant and seed
trained on the same rows (and by sd_only's head phase); prediction reads the target's float32
features from a second shared cache of the scored rows, stored by the first prediction over them
(`prediction_cache_max_bytes`), and logs progress lines.
`OutletsQuantile` (outlets_quantile) gives the length head one monotone output per
QUANTILE_LEVELS level, trained with the pinball loss on log1p(remaining): it predicts
remaining-length (and, after prefill, total-length) quantiles, and the median as the point.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.contract.distributions import LengthDistribution
from lenbench.heads.quantile_loss import start_at_quantiles
from lenbench.models.chat import eos_token_ids
from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.checkpoint import earlier_seconds
from lenbench.outlets.modeling import DraftConfig, DraftModel, check_choices
from lenbench.outlets.overhead import decode_step_ms
from lenbench.outlets.prediction_cache import prediction_pass
from lenbench.outlets.speculative import acceptance_report
from lenbench.outlets.target_cache import CacheHome, open_target_cache
from lenbench.outlets.train import draft_states, offline_acceptance, train_draft, uses_sd
from lenbench.outlets.vocab import build_draft_vocab

log = logging.getLogger(__name__)
VARIANTS = ("outlets", "lp_only", "sd_only", "no_decoder")
INFERRED = {  # choices the paper leaves open, recorded in every result (docs/predictors.md)
    "fusion_layers": "hs[2], hs[L//2], hs[L-3] (EAGLE-3 code; the paper writes N-2 at the top)",
    "length_loss_step": "TTT step 0 only, every response position",
    "static_position": "last prompt position, token input y_1",
    "prediction": "expm1(z_hat), at least 1 token, at most max_length - t (the generation cap)",
    "gate_projection": "separate W_theta (equivalent to fusing it into q_proj)",
    "sd_loss_mask": "train.sd_mask=predicted: positions whose predicted token is a response "
                    "token (EAGLE's code masks by loss_mask[t+k], two tokens earlier: "
                    "train.sd_mask=eagle)",
    "sd_loss_mean": "L_k averaged over all B*T positions, masked ones included (EAGLE); so the "
                    "L_SD : lambda*L_len balance moves with the response share of a batch",
    "length_head": "Linear H->H/2, ReLU, H/2->H/4, ReLU, H/4->1, with biases (2.62M at H=2048)",
    "head_l2": "gamma * sum of squares of the length head's weights and biases, in the loss "
               "(besides AdamW's decoupled weight decay on every trained parameter)",
    "draft_shape": "one target layer's shape (heads, kv heads, head_dim, intermediate) unless "
                   "`draft:` overrides it",
}


def _train_config(values: dict | None, **forced) -> TrainConfig:
    values = dict(values or {})
    known = {f.name for f in fields(TrainConfig)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"outlets train: unknown keys {sorted(unknown)}; valid: {sorted(known)}")
    if "betas" in values:
        values["betas"] = tuple(values["betas"])
    values.update(forced)
    return TrainConfig(**values)


def _sequences(split, rows=None) -> list[Sequence]:
    rows = range(len(split)) if rows is None else rows
    lengths = split.prompt_lengths
    out = []
    for i in rows:
        ids = split.sequence_token_ids(i)
        out.append(Sequence(ids, int(lengths[i]), len(ids) - int(lengths[i])))
    return out


class Outlets(Predictor):
    needs = Needs(steps=True, target_model=True)
    length_quantiles = False  # True: the length head emits quantiles (OutletsQuantile)

    def __init__(self, variant: str = "outlets", attention: str = "gated",
                 gate: str = "elementwise", head_input: str = "prenorm",
                 draft_vocab_size: int = 32000, draft: dict | None = None,
                 train: dict | None = None,
                 head_train: dict | None = None, spec_prompts: int = 32, spec_depth: int = 5,
                 spec_max_new_tokens: int = 64, overhead_batches: tuple[int, ...] = (1, 64),
                 overhead_context: int = 512, batch_tokens: int = 16384,
                 max_length: int | None = None, progress: bool = True,
                 prediction_cache_max_bytes: int = 12_000_000_000):
        if variant not in VARIANTS:
            raise ValueError(f"outlets.variant={variant!r}; use one of {list(VARIANTS)}")
        self.variant, self.progress = variant, progress
        self.reads_next_token = variant != "no_decoder"  # the draft layer's input is y_{t+1}
        check_choices(attention, gate, head_input)  # before any work
        self.choices = {"attention": attention, "gate": gate, "head_input": head_input,
                        "decoder": variant != "no_decoder",
                        "length_quantiles": self.length_quantiles}
        self.draft_vocab_size = draft_vocab_size
        self.draft_shape = dict(draft or {})
        forced = {"lp_only": {"sd_weight": 0.0}, "no_decoder": {"sd_weight": 0.0},
                  "sd_only": {"length_weight": 0.0}}.get(variant, {})
        self.train_cfg = _train_config(train, **forced)
        # sd_only's second phase: the train settings overridden by head_train, length loss only
        self.head_cfg = _train_config({**(train or {}), **(head_train or {})}, sd_weight=0.0) \
            if variant == "sd_only" else None
        self.spec = {"prompts": spec_prompts, "depth": spec_depth,
                     "max_new_tokens": spec_max_new_tokens}
        self.overhead_batches, self.overhead_context = tuple(overhead_batches), overhead_context
        self.batch_tokens = batch_tokens
        # the bound on one stored prediction pass (lenbench/outlets/prediction_cache.py)
        self.prediction_cache_max_bytes = prediction_cache_max_bytes
        self._passes: list[dict] = []  # how each prediction got the target's features
        self.max_length = max_length  # predictions clipped to [1, max_length] (remaining: - t)
        self.draft: DraftModel | None = None
        self._report: dict = {}
        self._scored = None

    @property
    def drafts(self) -> bool:
        """True when the backbone learned to draft (it has an SD loss to check)."""
        return self.variant in ("outlets", "sd_only")

    # --- training -----------------------------------------------------------------------------

    def build(self, target_model, d2t: torch.Tensor, t2d: torch.Tensor) -> DraftModel:
        """A freshly initialised draft: the same seed always gives the same weights, so the
        random-init reference is rebuilt from it instead of kept as a copy."""
        cfg = DraftConfig.from_target(target_model.config, len(d2t), self.draft_shape,
                                      **self.choices)
        torch.manual_seed(self.seed)
        draft = DraftModel(cfg, target_model.get_input_embeddings().weight, d2t, t2d)
        return draft.to(next(target_model.parameters()).device)

    def fit(self, train, val=None) -> None:
        target = train.target.model
        responses = train.response_token_ids
        if not any(len(r) for r in responses):
            raise ValueError("outlets trains on the target's own responses, and this data set "
                             "has none (label import); use a generated data set")
        vocab_size = target.config.vocab_size
        d2t, t2d, vocab_card = build_draft_vocab(responses, vocab_size,
                                                 min(self.draft_vocab_size, vocab_size))
        self.draft = self.build(target, d2t, t2d)
        seqs = _sequences(train)
        # one pass of the target serves both phases (sd_only's head phase reads its features),
        # and, kept under the harness's cache folder, every variant fitted on these rows
        home = CacheHome.of(train.target)
        teacher = uses_sd(self.draft, self.train_cfg)
        cache, cache_record = open_target_cache(target, seqs, self.train_cfg, t2d, teacher, home)
        # early stopping (train.patience) watches the objective on the validation rows, whose
        # target pass is cached (and shared) like the training rows'
        watches = max(self.train_cfg.patience, (self.head_cfg or self.train_cfg).patience) > 0
        val_seqs = _sequences(val) if watches and val is not None and len(val) else None
        val_cache, val_record = None, None
        try:
            if val_seqs:
                val_cache, val_record = open_target_cache(target, val_seqs, self.train_cfg,
                                                          t2d, teacher, home)
            history = {"backbone": train_draft(self.draft, target, seqs, self.train_cfg,
                                               self.seed, description=f"{self.variant} train",
                                               progress=self.progress, cache=cache,
                                               home=home, val_seqs=val_seqs,
                                               val_cache=val_cache)}
            if self.head_cfg is not None:  # sd_only: the head learns on the frozen backbone
                history["length_head"] = train_draft(self.draft, target, seqs, self.head_cfg,
                                                     self.seed, train_backbone=False,
                                                     description="sd_only head",
                                                     progress=self.progress, cache=cache,
                                                     home=home, val_seqs=val_seqs,
                                                     val_cache=val_cache)
        finally:
            for opened in (cache, val_cache):
                if opened is not None:
                    opened.close()
        self._report = {
            "variant": self.variant, "draft_config": self.draft.cfg.to_dict(),
            "train_config": self.train_cfg.to_dict(),
            "head_train_config": self.head_cfg.to_dict() if self.head_cfg else None,
            "inferred_choices": INFERRED, "draft_vocab": vocab_card,
            "parameters": self.draft.parameter_counts(), "training": history,
            "target_cache": cache_record, "validation_target_cache": val_record}

    # --- prediction ---------------------------------------------------------------------------

    def _predict_log(self, split, seqs, positions) -> list[np.ndarray]:
        target = split.target.model
        with prediction_pass(target, seqs, self.batch_tokens, CacheHome.of(split.target),
                             self.prediction_cache_max_bytes) as features:
            out = draft_states(self.draft, target, seqs, positions, self.batch_tokens,
                               f"{self.variant} predict", cache=features.cache,
                               store=features.store)
        self._passes.append(features.record)
        return out

    def predict(self, split) -> np.ndarray:
        """After prefill: the prompt plus y_1, read at the last prompt position."""
        return self._static(split)

    def predict_remaining(self, split) -> np.ndarray:
        return self._remaining(split)

    def _static(self, split) -> np.ndarray:
        """Clipped expm1 of the head at the post-prefill state: [n] (or [n, Q] quantiles)."""
        first = split.first_response_tokens
        if (first < 0).any():
            raise ValueError(f"{int((first < 0).sum())} rows have an empty response: OUTLETS's "
                             "static state reads y_1, the token sampled after prefill")
        seqs = [Sequence(np.append(np.asarray(p, dtype=np.int64), first[i]), len(p), 1)
                for i, p in enumerate(split.prompt_token_ids)]
        log.info("%s static prediction: %d rows", self.variant, len(seqs))
        z = self._predict_log(split, seqs, [np.array([s.n - 1]) for s in seqs])
        z = np.concatenate(z).astype(np.float64) if z else np.zeros((0, *self._width()))
        return self._clip(np.expm1(z), 0)

    def _width(self) -> tuple[int, ...]:
        levels = self.draft.length_levels
        return () if levels is None else (len(levels),)

    def _remaining(self, split) -> np.ndarray:
        """Clipped expm1 of the head at every step: [n_steps] (or [n_steps, Q] quantiles)."""
        # report()'s speculative check decodes the scored prompts and teacher-forces their
        # responses: it reads the dynamic view (predict() gets the static one, without responses)
        self._scored = split
        steps = split.steps
        order = np.argsort(steps.row, kind="stable")
        rows, starts = np.unique(steps.row[order], return_index=True)
        groups = np.split(order, starts[1:])
        seqs = _sequences(split, rows)
        positions = [seqs[j].n - 1 + steps.t[g] for j, g in enumerate(groups)]
        log.info("%s dynamic prediction: %d rows, %d steps", self.variant, len(seqs), len(steps))
        z = self._predict_log(split, seqs, positions)
        out = np.empty((len(steps), *self._width()), dtype=np.float64)
        for g, values in zip(groups, z):
            out[g] = values
        return self._clip(np.expm1(out), steps.t)

    def _clip(self, pred: np.ndarray, t) -> np.ndarray:
        """At least 1 token, and no more than the cap leaves after t generated tokens (per row,
        across every quantile of a row)."""
        upper = np.inf if self.max_length is None else np.maximum(self.max_length - t, 1)
        if pred.ndim == 2 and np.ndim(upper):
            upper = np.asarray(upper)[:, None]
        return np.clip(pred, 1.0, upper)

    # --- what the harness records -------------------------------------------------------------

    def earlier_fit_seconds(self) -> float:
        """Epochs that earlier runs of the same fit trained (lenbench/outlets/checkpoint.py)."""
        phases = (self._report or {}).get("training") or {}
        return sum(earlier_seconds(phase) for phase in phases.values())

    def num_parameters(self) -> int | None:
        if self.draft is None:
            return None
        counts = self.draft.parameter_counts()
        return counts["backbone"] + counts["length_head"]

    def report(self) -> dict:
        """Training record, parameter counts, decode-step overhead and, for drafting
        variants, speculative quality against a randomly initialised draft (on the scored
        split's prompts)."""
        if self.draft is None:
            return {}
        out = dict(self._report)
        # whether each prediction ran the target, stored its pass or read a stored one: the
        # prediction timings of a variant that read one exclude the target's cost
        out["prediction_cache"] = list(self._passes)
        device = str(next(self.draft.parameters()).device)
        amp = device.startswith("cuda")  # time it as it runs: bf16 autocast on a GPU
        out["overhead"] = {"device": device, "context": self.overhead_context,
                           "dtype": "bf16 autocast" if amp else "float32"} | {
            f"batch_{b}": {k: v for k, v in decode_step_ms(self.draft, b, self.overhead_context,
                                                           amp=amp).items() if k.endswith("_ms")}
            for b in self.overhead_batches}
        if self.drafts and self._scored is not None:
            out["speculative"] = self._speculative(self._scored)
        return out

    def _speculative(self, split) -> dict:
        target = split.target.model
        eos = set(eos_token_ids(target, split.target.tokenizer))
        _, first = np.unique(split.group_ids, return_index=True)
        pick = np.sort(first)[: self.spec["prompts"]]
        prompts = [split.prompt_token_ids[i] for i in pick]
        seqs = _sequences(split, pick)
        depth = self.spec["depth"]

        def measure(draft: DraftModel) -> dict:
            return {**acceptance_report(draft, target, prompts, depth,
                                        self.spec["max_new_tokens"], eos),
                    **offline_acceptance(draft, target, seqs, depth, self.batch_tokens)}

        trained = measure(self.draft)
        trained["random_init"] = measure(self.build(target, self.draft.d2t, self.draft.t2d))
        return trained

    # --- persistence --------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """The trained draft without the target's embedding (load() takes it from the target)."""
        torch.save({"config": self.draft.cfg.to_dict(), "state": self.draft.trained_state(),
                    "variant": self.variant, "seed": self.seed}, Path(path))

    def load(self, path: str | Path, target_model) -> None:
        blob = torch.load(Path(path), map_location="cpu", weights_only=True)
        if blob["variant"] != self.variant:
            raise ValueError(f"{path} holds a {blob['variant']} draft, not {self.variant}")
        quantiles = bool(blob["config"].get("length_quantiles", False))
        if quantiles != self.length_quantiles:
            kind = "quantile" if quantiles else "point"
            raise ValueError(f"{path} holds a draft with a {kind} length head; load it into "
                             f"{'OutletsQuantile' if quantiles else 'Outlets'}")
        state, self.seed = blob["state"], blob["seed"]
        embed = target_model.get_input_embeddings().weight
        self.draft = DraftModel(DraftConfig(**blob["config"]), embed, state["d2t"], state["t2d"])
        self.draft.load_trained_state(state)
        self.draft.to(embed.device).eval()


class OutletsQuantile(Outlets):
    """OUTLETS whose length head emits QUANTILE_LEVELS quantiles of log1p(remaining), monotone
    and trained with the pinball loss in place of the squared error; the point is the median."""

    length_quantiles = True

    def fit(self, train, val=None) -> None:
        # the head starts at the train split's marginal quantiles of log1p(remaining) (build)
        remaining = np.concatenate([np.arange(L, 0, -1) for L in train.lengths] or [[1]])
        self._start = torch.from_numpy(np.log1p(remaining.astype(np.float64)))
        super().fit(train, val)

    def build(self, target_model, d2t: torch.Tensor, t2d: torch.Tensor) -> DraftModel:
        draft = super().build(target_model, d2t, t2d)
        if getattr(self, "_start", None) is not None:
            start_at_quantiles(draft.length_head, self._start, draft.length_levels)
        return draft

    def _median(self, dist: LengthDistribution) -> np.ndarray:
        return dist.quantile([0.5])[:, 0]

    def predict_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_quantiles(self.draft.length_levels, self._static(split))

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_quantiles(self.draft.length_levels,
                                                 self._remaining(split))

    def predict(self, split) -> np.ndarray:
        return self._median(self.predict_distribution(split))

    def predict_remaining(self, split) -> np.ndarray:
        return self._median(self.predict_remaining_distribution(split))

    def report(self) -> dict:
        out = super().report()
        if out:
            out["length_head_output"] = {
                "levels": list(self.draft.length_levels),
                "loss": "pinball on log1p(remaining), in place of the squared error",
                "prediction": "median quantile (expm1, clipped like the point head)"}
        return out

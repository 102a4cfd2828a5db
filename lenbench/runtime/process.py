"""Process-wide settings a run fixes before its work: the random seeds and torch's threads."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def configure_threads(n: int | None) -> None:
    """torch fixes its thread pool at import; set it per job so jobs don't oversubscribe."""
    if n:
        torch.set_num_threads(int(n))
        os.environ.setdefault("OMP_NUM_THREADS", str(n))

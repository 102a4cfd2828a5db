"""The weight dtypes a model config may name, shared by loading and GGUF conversion."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

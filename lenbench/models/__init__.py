"""Target models: the embedded toy model (``toy``) and loading of any saved causal LM.

``ToyModelConfig`` and ``build_toy_model`` are re-exported lazily, so importing
``lenbench.models.loading`` does not pay for importing transformers' Llama classes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ToyModelConfig", "build_toy_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from lenbench.models import toy

        return getattr(toy, name)
    raise AttributeError(f"module 'lenbench.models' has no attribute {name!r}")

"""Every generation backend implements the one protocol of lenbench/generation/protocol.py: it
subclasses `Generator`, and its `generate` takes and returns exactly what the protocol declares,
so the runner and the dispatch treat backends alike."""

from __future__ import annotations

import inspect

import pytest

from lenbench.generation.backends import BACKENDS, make_generator
from lenbench.generation.hf import HFGenerator
from lenbench.generation.llamacpp_backend import LlamaCppGenerator
from lenbench.generation.openai_backend import OpenAIGenerator
from lenbench.generation.protocol import Generator
from lenbench.generation.vllm_backend import VLLMGenerator

BACKEND_CLASSES = {"hf": HFGenerator, "openai": OpenAIGenerator, "llamacpp": LlamaCppGenerator,
                   "vllm": VLLMGenerator}


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_follows_the_protocol(name: str) -> None:
    cls = BACKEND_CLASSES[name]  # a new backend: add its class here
    assert issubclass(cls, Generator)
    assert cls.generate is not Generator.generate  # implemented, not inherited from the protocol
    assert inspect.signature(cls.generate) == inspect.signature(Generator.generate)


def test_the_protocol_is_structural() -> None:
    class Recorder:
        def generate(self, requests, cfg, on_done=None):
            return [], None

    assert isinstance(Recorder(), Generator)
    assert not isinstance(object(), Generator)


def test_dispatch_returns_the_protocol() -> None:
    assert inspect.signature(make_generator).return_annotation in (Generator, "Generator")

"""The EOS-counting probe of the server backends, run once before the first request.

A few short greedy prompts (`generation.probe_prompts`) decide where lengths come from (token ids
where every probe response has them, else the server's own count) and whether that count
includes the EOS (lenbench/generation/length_counts.py says how). The verdict is recorded in the
generation card; a server that gives neither ids nor a count, or counts that fit no convention,
is refused before any label is made.
"""

from __future__ import annotations

import logging

from lenbench.generation.http_client import ServerError
from lenbench.generation.length_counts import (
    Convention,
    CountError,
    Observation,
    cap_verdict,
    decide,
    observe,
    text_token_count,
)
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.models.chat import render_prompt

log = logging.getLogger(__name__)


class EOSProbe:
    """Mixed into a server generator that has `call`, `ids_result`, `probe_ids_count`,
    `tokenizer`, `eos_ids`, `length_source`, `usage_counts_eos`, `probe_prompts` and
    `probe_max_tokens`."""

    def probe(self) -> Convention:
        """Once per generator: decide the length source and the server's EOS convention."""
        with self._probe_lock:
            if self.convention is None:
                self.convention = self._run_probe()
                log.info("%s: lengths from %s; server count includes EOS: %s (%s)", self.backend,
                         self.length_source, self.convention.counts_eos,
                         self.convention.decided_by)
            return self.convention

    def _run_probe(self) -> Convention:
        if self.tokenizer is None:  # no probe possible: only ids can give lengths
            if self.length_source == "usage":
                raise ServerError("lengths from usage need the tokenizer for the EOS probe")
            self.length_source = "token_ids"
            return Convention(None, "no probe: no tokenizer given", [])
        cfg = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=self.probe_max_tokens)
        observations, has_ids, has_count = [], [], []
        for text in self.probe_prompts:
            request = GenRequest(tuple(render_prompt(self.tokenizer, text)), (0,))
            reply = self.call(request, cfg)
            has_ids.append(reply.ids is not None)
            has_count.append(reply.count is not None)
            ids_len = self.probe_ids_count(reply) if reply.ids is not None else None
            obs = Observation(text, reply.finish_reason, reply.count,
                              text_token_count(self.tokenizer, reply.text, self.eos_ids), ids_len)
            try:
                if obs.finish_reason == "stop" and reply.ids is None and \
                        isinstance(reply.count, int) and reply.count >= 2:
                    observations.append(self._text_and_cap(request, obs))
                else:
                    observations.append(observe(obs, self.probe_max_tokens))
            except CountError as e:
                raise ServerError(f"{self.base_url}: {e}") from e
        where = f"{self.base_url}{self.completion_path}"
        if self.length_source == "auto":
            if all(has_ids):
                self.length_source = "token_ids"
            elif all(has_count):
                self.length_source = "usage"
            else:
                raise ServerError(f"{where} returned neither output token ids nor "
                                  "usage.completion_tokens; lengths cannot be counted (use a "
                                  "server that returns either, e.g. vLLM or llama-server)")
        if self.length_source == "token_ids" and not all(has_ids):
            raise ServerError(f"{where} returned no output token ids (generation.length_source="
                              "token_ids); set generation.length_source=auto to use its usage")
        if self.length_source == "usage" and not all(has_count):
            raise ServerError(f"{where} returned no usage.completion_tokens "
                              "(generation.length_source=usage)")
        try:
            convention = decide(observations, self.usage_counts_eos)
        except CountError as e:
            raise ServerError(f"{self.base_url}: {e}") from e
        if self.length_source == "usage" and convention.counts_eos is None:
            raise ServerError(f"{where}: no probe response ended on EOS, so whether the server's "
                              "count includes the EOS is unknown; set generation.usage_counts_eos"
                              "=true|false or give generation.probe_prompts that end")
        return convention

    def _text_and_cap(self, request: GenRequest, obs: Observation) -> Observation:
        """A stop without ids: the text's count, then the prompt re-asked capped at the count
        and one below. Text that is not the tokenizer's canonical split can fit the wrong
        convention by one token, so the capped answers decide; the text's verdict is recorded."""
        try:
            text_says = observe(Observation(**obs.as_dict()), self.probe_max_tokens).counts_eos
        except CountError:
            text_says = None
        answers = []
        for cap in (obs.count, obs.count - 1):
            reply = self.call(request, SamplingConfig(0.0, 1.0, cap))
            answers.append((reply.finish_reason, reply.count))
        obs.counts_eos = cap_verdict(obs.count, *answers)
        obs.basis = "text and cap" if text_says == obs.counts_eos else \
            "cap (the text is not the tokenizer's canonical split)"
        return obs

"""The label table: one row per sampled response, the table every label producer writes.

The generate stage (`lenbench/generation/runner.py`) and label import
(`lenbench/generation/labels_import.py`) both write it, and the views (`views.py`) are built from
it, so its columns are part of the contract between them:

- `prompt_id`, `sample_idx`: which prompt (a hash of its normalised text) and which of its samples;
- `split`: train, val or test (by prompt, so a prompt's samples never straddle splits);
- `family`: the prompt's family where the source has one (toyworld), else empty;
- `text`, `prompt_token_ids`: the prompt and its ids rendered through the chat template;
- `output_token_ids`: the response's ids (empty where a trace gave only the length);
- `L`: the response length in tokens, EOS included (docs/protocol.md, Labels);
- `finish_reason`: "stop" (EOS emitted) or "length" (cut at the cap);
- `censored`: whether the row was cut at the cap, so `L` is a lower bound.
"""

LABEL_COLUMNS = ["prompt_id", "sample_idx", "split", "family", "text", "prompt_token_ids",
                 "output_token_ids", "L", "finish_reason", "censored"]

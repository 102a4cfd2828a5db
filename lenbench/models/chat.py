"""How a target model is spoken to: its chat template renders a prompt, its EOS ids end a response.

The generate stage, label import, the parity report and the predictors that run the live model
render prompts the same way, and every backend and a GGUF conversion read the same EOS ids, so
both live once, beside the models.
"""

from __future__ import annotations


def render_prompt(tokenizer, text: str, template_kwargs: dict | None = None) -> list[int]:
    """Token ids of a user prompt rendered through the model's chat template.

    `template_kwargs` are the template's own variables (model.chat_template_kwargs), e.g. Qwen3's
    `enable_thinking` or a pinned `date_string` for Llama 3.x, whose template otherwise writes
    today's date into every prompt.
    """
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True,
                                            **(template_kwargs or {}))
        if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer(text)["input_ids"]


def eos_token_ids(model, tokenizer) -> list[int]:
    """The ids that end a response: the generation config's EOS ids plus the tokenizer's.

    `model` is a loaded model or a `transformers.GenerationConfig` (see `pretrained_eos_ids`, which
    reads the same ids without loading weights).
    """
    config = getattr(model, "generation_config", model)
    ids = config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the model has no EOS token: set generation_config.eos_token_id")
    return sorted(set(ids))


def pretrained_eos_ids(path: str, tokenizer, revision: str | None = None) -> list[int]:
    """`eos_token_ids` of a saved model without loading its weights (the generation config the
    model itself would load: generation_config.json, else one derived from config.json)."""
    from transformers import AutoConfig, GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(path, revision=revision)
    except OSError:  # no generation_config.json
        config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(path,
                                                                               revision=revision))
    return eos_token_ids(config, tokenizer)

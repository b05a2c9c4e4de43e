"""Config rules that need the machine or the model, checked before the run directory is made (issue #29).

`config_checks` knows what a value may be in general; this module knows what
this machine and these models allow: a device that is there, a cache folder
that is a folder, ARGS's top-k within the vocabulary, and a generation length
within the model's context. runner/resolve.py runs them once, before the run
directory is made: a refused config leaves nothing behind, so the corrected
command starts cleanly.

    persalign run demo device=cuda        # on a machine without CUDA: one line, exit 2
"""

from __future__ import annotations

from persalign.core.errors import ConfigError


def check_device(name: str) -> None:
    import torch

    from persalign.models.device import resolve_device

    device = resolve_device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config.device: {name!r} is not available here (torch sees no CUDA device); "
                          "use device: auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"config.device: {name!r} is not available here (no Apple MPS device); use device: auto")


def check_cache_dir(configured: str | None) -> None:
    from persalign.models.aliases import default_cache_dir

    folder = default_cache_dir(configured)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"config.cache_dir: {folder} is a file, not a folder; give a folder for the model and "
                          "feature caches (or unset it: PERSALIGN_CACHE or ~/.cache/persalign)")


def policy_config(name: str, cache_dir: str | None):
    """A policy's model config, without its weights where the model has a folder."""
    from persalign.core.registry import MODELS

    if name in MODELS and MODELS.get(name).config is not None:
        return MODELS.get(name).config()
    if name in MODELS and MODELS.get(name).build is not None:
        return MODELS.get(name).build()[0].config
    from transformers import AutoConfig

    from persalign.models.loading import from_pretrained, resolve_model_path

    return from_pretrained(AutoConfig, resolve_model_path(name, cache_dir), f"causal LM {name!r}")


def model_limits(name: str, cache_dir: str | None) -> tuple[int, int | None]:
    """(vocabulary size, context length or None if the model states none) of a policy, without its weights
    where possible."""
    from persalign.core.prompts import context_length

    config = policy_config(name, cache_dir)
    return config.vocab_size, context_length(config)


def policy_tokenizer(name: str, cache_dir: str | None):
    """A policy's tokenizer alone (no weights where the model has a folder)."""
    from persalign.core.registry import MODELS

    if name in MODELS and MODELS.get(name).tokenizer is not None:
        return MODELS.get(name).tokenizer()
    if name in MODELS and MODELS.get(name).build is not None:
        return MODELS.get(name).build()[1]
    from transformers import AutoTokenizer

    from persalign.models.loading import from_pretrained, resolve_model_path

    return from_pretrained(AutoTokenizer, resolve_model_path(name, cache_dir), f"causal LM {name!r}")


def check_model_limits(config, policy: str, model_config) -> None:
    """A policy's vocabulary and context (from its `model_config`) against args.top_k and the generation length."""
    from persalign.core.prompts import context_length

    vocab, context = model_config.vocab_size, context_length(model_config)
    if config.methods and config.args.top_k > vocab:
        raise ConfigError(f"config.args.top_k: {config.args.top_k} is not allowed (must be at most the "
                          f"vocabulary of {policy!r}: {vocab} tokens)")
    if context and config.generation.max_new_tokens >= context:
        raise ConfigError(f"config.generation.max_new_tokens: {config.generation.max_new_tokens} is not allowed "
                          f"(must leave room for the prompt in {policy!r}'s context of {context} tokens)")

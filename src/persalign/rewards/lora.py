"""LoRA on a reward backbone through PEFT: rank 8, alpha 16, rsLoRA (paper appendix F.1).

Only the adapter weights train; the base weights stay frozen (a test checks
both). Adapters save with safetensors (PEFT's default) and load without pickle.
"""

from __future__ import annotations

from dataclasses import replace

DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def attach_lora(lm, rank: int = 8, alpha: int = 16, targets: list[str] | None = None, dropout: float = 0.0,
                seed: int = 0):
    """A copy of the LoadedLM whose model carries a fresh trainable LoRA adapter, its A matrices drawn from
    `seed`: PEFT draws them from torch's global generator, which torch seeds at random in every process, so
    an unseeded adapter (and the RM trained from it) differed from run to run."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, use_rslora=True, lora_dropout=dropout,
                        target_modules=targets or DEFAULT_TARGETS, bias="none")
    with torch.random.fork_rng(devices=[]):  # the caller's generator is left as it was
        torch.manual_seed(seed)
        model = get_peft_model(lm.model, config)
    return replace(lm, model=model)


def save_adapter(lm, folder) -> None:
    lm.model.save_pretrained(str(folder), safe_serialization=True)


def load_adapter(lm, folder):
    from peft import PeftModel

    return replace(lm, model=PeftModel.from_pretrained(lm.model, str(folder)).eval())

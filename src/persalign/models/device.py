"""Pick the device and dtype: CUDA + bf16 where present, else CPU float32; overridable."""

from __future__ import annotations

import torch

from persalign.core.errors import ConfigError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"device {name!r} is not a torch device ({exc})") from exc


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ConfigError(f"dtype {name!r} unknown (choose auto or one of {sorted(DTYPES)})")
    return DTYPES[name]

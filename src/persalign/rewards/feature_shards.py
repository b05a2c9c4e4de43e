"""The on-disk shards of a frozen backbone's feature cache, read on demand (issue #73: memory).

A frozen `RewardBackbone` appends one safetensors shard per save. Reading every shard whole when a backbone
is built put the entire cache in each process that builds one: 678 MB for the full news study, held by the
shared ARGS pass (which reads only the held-out, query and generated pairs' features) beside every other
task of the pool. Here only the shards' headers are read at first (safetensors' `safe_open`: the names, dtypes
and shapes, the file's size checked against them); a feature is read from its shard when a caller asks for
it. A shard whose header is damaged is set aside and its features computed again, as before; one that turns
out unreadable when read (moved or cut by another process meanwhile) is set aside then, and what it held is
computed again.

    pytest tests/test_feature_cache.py
"""

from __future__ import annotations

from pathlib import Path

import torch

from persalign.core.files import set_aside, short


def _header(shard: Path) -> list[str] | None:
    """The names a shard holds, or None (set aside) where its header or a tensor's kind is not a feature's."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(shard), framework="pt") as handle:
            names = list(handle.keys())
            kinds_ok = all(len(handle.get_slice(name).get_shape()) in (1, 2)
                           and handle.get_slice(name).get_dtype() in ("F32", "BF16", "F16", "F64")
                           for name in names)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        set_aside(shard, short(error), "its features are computed again")
        return None
    if not kinds_ok:
        set_aside(shard, "a tensor that is not a feature vector or matrix", "its features are computed again")
        return None
    return names


class FeatureShards:
    """Which shard holds each stored feature; `read(keys)` loads those asked for, one open per shard."""

    def __init__(self, folder: Path | None):
        self.where: dict[str, Path] = {}
        for shard in sorted(folder.glob("shard-*.safetensors")) if folder is not None else []:
            for name in _header(shard) or []:
                self.where[name] = shard

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def read(self, keys) -> dict[str, torch.Tensor]:
        """The stored features of `keys` (those in no readable shard are left out: the caller computes them)."""
        from safetensors import SafetensorError, safe_open

        by_shard: dict[Path, list[str]] = {}
        for key in keys:
            if key in self.where:
                by_shard.setdefault(self.where[key], []).append(key)
        out: dict[str, torch.Tensor] = {}
        for shard, names in by_shard.items():
            try:
                with safe_open(str(shard), framework="pt") as handle:
                    # a copy: safetensors hands out views of the file's mapping, and a shard cut or rewritten in
                    # place after this read would end the process with SIGBUS at the feature's next use
                    out.update({name: handle.get_tensor(name).clone() for name in names})
            except (SafetensorError, OSError, ValueError, RuntimeError) as error:
                if shard.exists():
                    set_aside(shard, short(error), "its features are computed again")
                self.where = {k: s for k, s in self.where.items() if s != shard}
        return out

"""Frozen feature cache: shards hold only new entries, and a new backbone object reloads them all."""

import torch

from persalign.rewards.backbone import RewardBackbone
from tests.test_rewards_args import toy_pairs


def test_feature_cache_appends_shards_with_only_new_entries_and_reloads_them(tiny_lm, tmp_path):
    data = toy_pairs(tiny_lm, 6, 0)
    first = RewardBackbone(tiny_lm, "tiny-cache", tmp_path)
    states = first.states(data.prompts[:3], data.chosen[:3])
    folder = tmp_path / "features" / "tiny-cache"
    assert len(list(folder.glob("shard-*.safetensors"))) == 1
    first.states(data.prompts[:3], data.chosen[:3])  # all cached: nothing written
    assert len(list(folder.glob("shard-*.safetensors"))) == 1
    first.states(data.prompts, data.chosen)  # three new entries -> one new shard with exactly those
    shards = sorted(folder.glob("shard-*.safetensors"), key=lambda p: p.stat().st_mtime_ns)
    from safetensors.torch import load_file

    assert len(shards) == 2 and len(load_file(str(shards[0]))) == 3 and len(load_file(str(shards[1]))) == 3
    reloaded = RewardBackbone(tiny_lm, "tiny-cache", tmp_path)
    assert len(reloaded._cache) == 6
    for a, b in zip(states, reloaded.states(data.prompts[:3], data.chosen[:3])):
        assert torch.equal(a, b)

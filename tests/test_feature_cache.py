"""Frozen feature cache: shards hold only new entries, a new backbone object finds them all, and reads a feature
only when asked for it (issue #73: the whole cache in every process before)."""

import torch

from persalign.rewards.backbone import RewardBackbone
from tests.test_rewards_args import toy_pairs


def test_feature_cache_appends_shards_with_only_new_entries_and_reloads_them(tiny_lm, tmp_path):
    data = toy_pairs(tiny_lm, 6, 0)
    first = RewardBackbone(tiny_lm, "tiny-cache", tmp_path)
    states = first.states(data.prompts[:3], data.chosen[:3])
    folder = first.cache_path
    assert len(list(folder.glob("shard-*.safetensors"))) == 1
    first.states(data.prompts[:3], data.chosen[:3])  # all cached: nothing written
    assert len(list(folder.glob("shard-*.safetensors"))) == 1
    first.states(data.prompts, data.chosen)  # three new entries -> one new shard with exactly those
    shards = sorted(folder.glob("shard-*.safetensors"), key=lambda p: p.stat().st_mtime_ns)
    from safetensors.torch import load_file

    def responses_in(shard):  # prompts' last states ride along (see states_before)
        return [k for k in load_file(str(shard)) if not k.startswith("prompt-")]

    assert len(shards) == 2 and len(responses_in(shards[0])) == 3 and len(responses_in(shards[1])) == 3
    reloaded = RewardBackbone(tiny_lm, "tiny-cache", tmp_path)
    assert len([k for k in reloaded.cached_keys() if not k.startswith("prompt-")]) == 6
    for a, b in zip(states, reloaded.states(data.prompts[:3], data.chosen[:3])):
        assert torch.equal(a, b)


def test_a_new_backbone_reads_only_the_features_it_is_asked_for(tiny_lm, tmp_path):
    """Before, building a backbone read every shard whole: each task of the pool held the study's whole cache
    (678 MB on the full news study) whatever it used. Fails on that code: the fresh backbone held all 12."""
    data = toy_pairs(tiny_lm, 6, 0)
    written = RewardBackbone(tiny_lm, "tiny-lazy", tmp_path)
    expected = written.states(data.prompts, data.chosen)
    fresh = RewardBackbone(tiny_lm, "tiny-lazy", tmp_path)
    assert fresh._cache == {} and len(fresh.cached_keys()) == 12  # 6 responses, 6 prompts' last states
    fresh._forward_shared_prompts = lambda *args: (_ for _ in ()).throw(AssertionError("recomputed"))
    for a, b in zip(expected[2:4], fresh.states(data.prompts[2:4], data.chosen[2:4])):
        assert torch.equal(a, b)
    assert len(fresh._cache) == 2


def test_a_shard_cut_after_its_header_was_read_is_set_aside_and_its_features_computed_again(tiny_lm, tmp_path):
    data = toy_pairs(tiny_lm, 2, 0)
    expected = RewardBackbone(tiny_lm, "tiny-cut", tmp_path).states(data.prompts, data.chosen)
    reader = RewardBackbone(tiny_lm, "tiny-cut", tmp_path)
    shard = next(reader.cache_path.glob("shard-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])  # another process cut it after this one read its header
    for a, b in zip(expected, reader.states(data.prompts, data.chosen)):
        assert torch.equal(a, b)
    assert (shard.parent / (shard.name + ".damaged")).exists()


def test_a_feature_read_stays_readable_when_its_shard_is_cut_afterwards(tiny_lm, tmp_path):
    """safetensors hands out views of the file's mapping: before, a shard cut in place after a read ended the
    process with SIGBUS at the feature's next use (this test crashed its worker)."""
    data = toy_pairs(tiny_lm, 2, 0)
    expected = RewardBackbone(tiny_lm, "tiny-mapped", tmp_path).states(data.prompts, data.chosen)
    reader = RewardBackbone(tiny_lm, "tiny-mapped", tmp_path)
    read = reader.states(data.prompts, data.chosen)
    for shard in reader.cache_path.glob("shard-*.safetensors"):
        shard.write_bytes(b"")
    for a, b in zip(expected, read):
        assert torch.equal(a, b)


def test_states_before_reuse_the_cached_states_and_equal_a_shifted_forward(tiny_lm, tmp_path):
    """GenARM's features: [h(x_last), h(y<T)] from the shared cache, no second forward over shifted sequences."""
    data = toy_pairs(tiny_lm, 6, 0)
    backbone = RewardBackbone(tiny_lm, "tiny-before", tmp_path)
    backbone.states(data.prompts, data.chosen)  # what the other methods already computed
    calls = []
    forward = backbone._forward_shared_prompts
    backbone._forward_shared_prompts = lambda *args: calls.append(args) or forward(*args)
    before = backbone.states_before(data.prompts, data.chosen)
    assert calls == []
    shifted = backbone.states([p[:-1] for p in data.prompts],
                              [[p[-1]] + r[:-1] for p, r in zip(data.prompts, data.chosen)])
    for a, b in zip(before, shifted):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
    reloaded = RewardBackbone(tiny_lm, "tiny-before", tmp_path)  # prompt states persist in the shards
    reloaded._forward_shared_prompts = lambda *args: (_ for _ in ()).throw(AssertionError("recomputed"))
    for a, b in zip(before, reloaded.states_before(data.prompts, data.chosen)):
        assert torch.equal(a, b)
    older = RewardBackbone(tiny_lm, "tiny-before", tmp_path)  # a cache written before prompt states were kept
    older._stored.where = {k: s for k, s in older._stored.where.items() if not k.startswith("prompt-")}
    for a, b in zip(before, older.states_before(data.prompts, data.chosen)):
        assert torch.allclose(a, b, atol=1e-5)


def test_a_frozen_feature_is_the_same_whatever_else_is_computed_with_it(tiny_lm, tmp_path):
    """Cached features are shared across runs, so they must not depend on their batch (or on what the
    cache held): before, a pair padded beside a longer prompt or response got different floats."""
    data = toy_pairs(tiny_lm, 6, 0)
    alone = RewardBackbone(tiny_lm, "tiny-alone").states(data.prompts[:1], data.chosen[:1])[0]
    longer_prompt = data.prompts[1] + data.prompts[2]
    longer_response = data.chosen[1] + data.chosen[2] + data.chosen[3]
    crowd = RewardBackbone(tiny_lm, "tiny-crowd")
    crowd.token_budget = 10_000
    together = crowd.states([longer_prompt, data.prompts[0], data.prompts[0]],
                            [data.chosen[1], data.chosen[0], longer_response])
    assert torch.equal(alone, together[1])
    assert crowd.prompt_states(data.prompts[:1])[0].equal(
        RewardBackbone(tiny_lm, "tiny-alone-prompt").prompt_states(data.prompts[:1])[0])


def test_a_cache_filled_by_the_padded_feature_pass_is_not_mixed_in(tiny_lm, tmp_path):
    data = toy_pairs(tiny_lm, 2, 0)
    RewardBackbone(tiny_lm, "tiny-old", tmp_path).states(data.prompts, data.chosen)
    written = next((tmp_path / "features").iterdir())
    written.rename(tmp_path / "features" / "tiny-old")  # where the padded pass of earlier versions kept its shards
    assert RewardBackbone(tiny_lm, "tiny-old", tmp_path).cached_keys() == set()


def test_a_bf16_backbone_stores_bf16_states_and_hands_out_their_exact_float32(tiny_lm, tmp_path):
    """Issue #40 point 4: float32 copies of a bf16 model's states doubled the cache (7B: 14 KiB per
    response token) for no information. Fails before: the shard held float32."""
    import copy

    from safetensors.torch import load_file

    from persalign.models.loading import LoadedLM

    lm = LoadedLM("tiny-bf16", copy.deepcopy(tiny_lm.model).to(torch.bfloat16), tiny_lm.tokenizer, tiny_lm.device)
    data = toy_pairs(tiny_lm, 6, 0)
    backbone = RewardBackbone(lm, "tiny-bf16", tmp_path)
    states = backbone.states(data.prompts, data.chosen)
    assert all(s.dtype == torch.float32 for s in states)
    stored = load_file(str(next(backbone.cache_path.glob("shard-*.safetensors"))))
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    reloaded = RewardBackbone(lm, "tiny-bf16", tmp_path).states(data.prompts, data.chosen)
    uncached = RewardBackbone(lm, "tiny-bf16-uncached").states(data.prompts, data.chosen)
    for a, b, c in zip(states, reloaded, uncached):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert {RewardBackbone(tiny_lm, "tiny-f32").stored_dtype} == {torch.float32}

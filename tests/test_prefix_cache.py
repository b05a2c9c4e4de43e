"""ICL's per-user demonstrations and the reused prefix cache (issue #31 point 2).

A prompt prefix read from the cache must give what a full prefill of the same prompt
gives: the same greedy tokens, log-probs within float tolerance.

    pytest tests/test_prefix_cache.py
"""

from collections import defaultdict

import numpy as np
import pytest
import torch

from persalign.engine.decoding import decode_from, greedy, prefill
from persalign.engine.prefix_cache import PrefixCache, shared_prefix_lengths
from persalign.engine.scoring import logprobs_from_prefill
from persalign.models.tiny import tiny_llama
from persalign.runner.run import run
from tests.bad_input_helpers import QUIET
from tests.test_runner import all_rows, tiny_config


class TinyLM:
    def __init__(self):
        self.model, self.tokenizer = tiny_llama()
        self.device = torch.device("cpu")


def _prompts(rng):
    demos_a, demos_b = list(rng.integers(5, 200, 40)), list(rng.integers(5, 200, 30))
    prompts = [demos_a + list(rng.integers(5, 200, n)) for n in (3, 9, 1)]
    prompts += [demos_b + [7, 8], list(rng.integers(5, 200, 12)), demos_b + [9]]
    return prompts, ["a", "a", "a", "b", "c", "b"]


def _assert_same_as_full_prefill(lm, prompts, state):
    rng = np.random.default_rng(1)
    responses = [[list(rng.integers(5, 200, 5)) for _ in prompts], [list(rng.integers(5, 200, 4)) for _ in prompts]]
    full = logprobs_from_prefill(lm, prefill(lm, prompts), responses)
    cached = logprobs_from_prefill(lm, state(), responses)
    for full_group, cached_group in zip(full, cached):
        for a, b in zip(full_group, cached_group):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)  # float summation order only
    assert decode_from(lm, prefill(lm, prompts), greedy, 12) == decode_from(lm, state(), greedy, 12)


def test_shared_prefix_lengths_are_per_group_and_leave_the_last_token():
    prompts, groups = _prompts(np.random.default_rng(0))
    assert shared_prefix_lengths(prompts, groups, min_tokens=4) == [40, 40, 40, 30, 0, 30]
    assert shared_prefix_lengths([[1, 2, 3], [1, 2, 3]], ["u", "u"], min_tokens=1) == [2, 2]  # never the whole
    assert shared_prefix_lengths(prompts, groups, min_tokens=41) == [0] * 6  # too short to be worth it


def test_a_cached_prefix_gives_the_full_prefills_tokens_and_logprobs():
    lm = TinyLM()
    prompts, groups = _prompts(np.random.default_rng(0))
    cache = PrefixCache(lm)
    shared = shared_prefix_lengths(prompts, groups, min_tokens=4)
    _assert_same_as_full_prefill(lm, prompts, lambda: cache.prefill(prompts, shared))
    assert cache.prefilled == 2  # users a and b, each once, though used three times


def test_a_prefix_is_reused_across_batches_and_the_batch_in_hand_is_never_evicted():
    lm = TinyLM()
    prompts, groups = _prompts(np.random.default_rng(0))
    shared = shared_prefix_lengths(prompts, groups, min_tokens=4)
    cache = PrefixCache(lm, capacity=1)
    _assert_same_as_full_prefill(lm, prompts, lambda: cache.prefill(prompts, shared))  # two prefixes > capacity
    assert cache.prefilled == 2
    first_two = (prompts[:2], shared[:2])
    _assert_same_as_full_prefill(lm, first_two[0], lambda: cache.prefill(*first_two))
    assert cache.prefilled == 2 and len(cache.entries) == 1  # a reused; b, not in hand, evicted (capacity 1)
    user_b = ([prompts[3], prompts[5]], [shared[3], shared[5]])
    _assert_same_as_full_prefill(lm, user_b[0], lambda: cache.prefill(*user_b))
    assert cache.prefilled == 3  # b computed again, once


def test_old_prefixes_leave_before_a_batchs_new_ones_are_computed():
    """Issue #73 (memory): an ICL 8-shot cell kept 8 users' prefixes (~370 MB at news size) and computed a
    batch's new ones beside them. Batches go user by user, so one is kept, and the others leave first (fails
    before: the default kept 8, and both users' prefixes were held while the third was computed)."""
    lm = TinyLM()
    prompts, groups = _prompts(np.random.default_rng(0))
    shared = shared_prefix_lengths(prompts, groups, min_tokens=4)
    cache = PrefixCache(lm)
    cache.prefill(prompts, shared)  # users a and b
    held = []
    compute = cache._compute_missing
    cache._compute_missing = lambda keys: held.append(len(cache.entries)) or compute(keys)
    third = [p[:-1] + [7, 7, 7, 7, 7, 7] for p in prompts[:2]]  # another user's prefix: a new one
    cache.prefill([[9, 9, 9, 9, 9] + p for p in third], [5, 5])
    assert held == [1] and len(cache.entries) == 2


def _icl_run(tmp_path, *extra):
    config = tiny_config("seeds=[0]", "methods=[]", "decoders=[{name: icl, shots: 3}]", *extra)
    store = run(config, tmp_path, **QUIET)
    (rows,) = all_rows(store).values()
    return store, rows


def test_icl_draws_one_demonstration_set_per_user_unless_per_query(tmp_path, cache_dir):
    """Eq. 7's D_k^demo: every query of a user sees the same demonstrations. Fails before issue #31 point 2
    (demonstrations were drawn anew for every query)."""
    _, rows = _icl_run(tmp_path / "per-user")
    per_user = defaultdict(set)
    for row in rows:
        per_user[row["user"]].add(tuple(row["demo_ids"]))
    assert all(len(sets) == 1 for sets in per_user.values())
    _, rows = _icl_run(tmp_path / "per-query", "decoders=[{name: icl, shots: 3, draw: per_query}]")
    per_query = defaultdict(set)
    for row in rows:
        per_query[row["user"]].add(tuple(row["demo_ids"]))
    assert any(len(sets) > 1 for sets in per_query.values())


def test_the_shared_block_is_counted_once_per_user_and_batches_keep_users_together(tmp_path, cache_dir):
    store, rows = _icl_run(tmp_path / "run", "generation.batch_size=4")
    (metrics,) = store.all_metrics()
    assert metrics["settings"]["draw"] == "per_user"
    users_per_batch = defaultdict(set)
    for row in rows:
        users_per_batch[row["batch"]].add(row["user"])
    assert max(len(users) for users in users_per_batch.values()) <= 2  # 5 queries per user, 4 per batch
    counted = sum(row["work_prefill_tokens"] for row in rows)
    written = sum(row["prompt_tokens"] for row in rows)
    assert counted < written * 0.6  # each user's 3-demo block once, not once per query
    by_user = defaultdict(list)
    for row in rows:
        by_user[row["user"]].append(row["prompt_tokens"])
    assert counted >= sum(min(lengths) for lengths in by_user.values())


@pytest.mark.slow
@pytest.mark.needs_models
def test_smollm2_icl_prompts_from_a_cached_demonstration_block_match_a_full_prefill():
    from persalign.core.prompts import PromptFormatter
    from persalign.core.records import UserItem
    from persalign.data.demo_authors import demo_records
    from persalign.models.loading import load_causal_lm

    lm = load_causal_lm("smollm2-135m-instruct")
    formatter = PromptFormatter(lm.tokenizer, "headline")
    records = demo_records()
    demos = [UserItem(f"d{i}", "u", r["input"], r["output"]) for i, r in enumerate(records[:4])]
    prompts = [formatter.prompt_ids(r["input"], demos) for r in records[4:10]]
    shared = shared_prefix_lengths(prompts, ["u"] * len(prompts))
    assert shared[0] > 200  # the instruction and the four demonstrations
    cache = PrefixCache(lm)
    _assert_same_as_full_prefill(lm, prompts, lambda: cache.prefill(prompts, shared))

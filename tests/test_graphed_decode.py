"""The policy's graphed decode step (engine/graphed_decode.py) writes what the eager loop (`decode_from`) writes.

On the CPU the step runs uncaptured; tests/test_cuda.py checks the captured replay on a GPU (issue #76).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from persalign.decoders.best_of_n_samples import sampler
from persalign.engine.decoding import decode_from, greedy, prefill
from persalign.engine.graphed_decode import GraphedDecodes
from persalign.engine.prefix_cache import PrefixCache
from persalign.engine.scoring import logprobs_from_prefill
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from tests.test_rewards_args import prompts_of

TEXTS = ["rain", "a long day at the council", "markets fall", "the mayor speaks on the new bridge"]


@pytest.fixture(scope="module")
def policy() -> LoadedLM:
    """A tiny policy whose end-of-text row is scaled up, so that rows end at different steps."""
    model, tokenizer = tiny_llama(seed=4)
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] *= 3.5  # rows end at 4 and 16 tokens
    return LoadedLM("tiny-llama", model, tokenizer, torch.device("cpu"))


def both(lm, prompts, choose_of, new: int = 16):
    """(eager tokens, graphed tokens) from one prefill each; `choose_of()` builds a fresh chooser per path."""
    eager = decode_from(lm, prefill(lm, prompts), choose_of(), new)
    graphed = GraphedDecodes().decode_from(lm, prefill(lm, prompts), choose_of(), new)
    return eager, graphed


def test_greedy_on_the_graphed_step_writes_what_the_eager_loop_writes(policy):
    eager, graphed = both(policy, prompts_of(policy, TEXTS), lambda: greedy)
    assert graphed == eager
    assert len({len(row) for row in eager}) > 1, "the rows should end at different steps for this test to bite"


def test_sampling_on_the_graphed_step_draws_what_the_eager_loop_draws(policy):
    """Best-of-N's seeded per-row sampler runs between steps on either path: the same samples."""
    prompts = [p for p in prompts_of(policy, TEXTS[:2]) for _ in range(3)]
    keys = [f"q{i}#{k}" for i in range(2) for k in range(3)]
    eager, graphed = both(policy, prompts, lambda: sampler(7, keys, temperature=1.0))
    assert graphed == eager
    assert len({tuple(row) for row in eager}) > 2, "samples of one prompt should differ"


def test_an_icl_prefix_cache_prefill_decodes_the_same_on_the_graphed_step(policy):
    """ICL's prefill reads a shared demonstration block from the prefix cache; the graphed step starts from it."""
    block = prompts_of(policy, ["the first demonstration headline of this user, and a second one"])[0]
    prompts = [block + p for p in prompts_of(policy, TEXTS)]
    shared = [len(block)] * len(prompts)
    eager = decode_from(policy, PrefixCache(policy).prefill(prompts, shared), greedy, 12)
    graphed = GraphedDecodes().decode_from(policy, PrefixCache(policy).prefill(prompts, shared), greedy, 12)
    assert graphed == eager


def test_a_kept_step_serves_later_decodes_and_leaves_the_prefill_for_scoring(policy):
    """Later decodes of the same rows and slot bucket load their prefill into the kept buffers (on CUDA: replay
    the kept graph); the prefill's own cache is not extended, so scoring from it reads the prompt alone."""
    graphs = GraphedDecodes()
    for texts in (TEXTS[:2], TEXTS[2:], TEXTS[1:3]):
        prompts = prompts_of(policy, texts)
        state = prefill(policy, prompts)
        assert graphs.decode_from(policy, state, greedy, 10) == decode_from(policy, prefill(policy, prompts), greedy,
                                                                             10)
        responses = prompts_of(policy, ["a reply", "another reply"])
        after = logprobs_from_prefill(policy, state, [responses])[0]
        fresh = logprobs_from_prefill(policy, prefill(policy, prompts), [responses])[0]
        assert all(np.array_equal(a, b) for a, b in zip(after, fresh))
    assert len(graphs.replayers) == 1


def test_a_policy_with_graphs_decodes_through_them(policy, monkeypatch):
    """`decode_from` hands a policy whose `graphs` is set (generation.cuda_graph) to its graphed decodes."""
    calls = []
    graphs = GraphedDecodes()
    real = graphs.decode_from
    monkeypatch.setattr(graphs, "decode_from", lambda *a: calls.append(1) or real(*a))
    lm = LoadedLM(policy.name, policy.model, policy.tokenizer, policy.device, graphs=graphs)
    prompts = prompts_of(policy, TEXTS)
    assert decode_from(lm, prefill(lm, prompts), greedy, 8) == decode_from(policy, prefill(policy, prompts), greedy, 8)
    assert calls == [1]


def test_a_run_with_generation_cuda_graph_reports_the_eager_runs_numbers(tmp_path, cache_dir, monkeypatch):
    """`generation.cuda_graph: true`: zero-shot, ICL, ICL-RAG, ARGS's λ = 0 decodes and Best-of-N's samples
    decode on the graphed step (uncaptured here), and every reported number and generation equal the eager
    run's (float32)."""
    from tests.test_same_numbers import lora_run

    decodes = []
    real = GraphedDecodes.decode_from
    monkeypatch.setattr(GraphedDecodes, "decode_from", lambda self, *a: decodes.append(1) or real(self, *a))
    extra = ["decoders=[{name: zero_shot}, {name: icl, shots: 2}, {name: icl_rag, shots: 2}]",
             "best_of_n.enabled=true", "best_of_n.ns=[2]"]
    eager = lora_run(tmp_path / "eager", *extra)
    assert not decodes
    graphed = lora_run(tmp_path / "graphed", *extra, "generation.cuda_graph=true")
    assert decodes, "the run's decodes should take the graphed step"
    assert graphed == eager


def test_at_most_max_kept_steps_stay_the_least_recently_used_going_first(policy, monkeypatch):
    """RL decodes one merged model per user: each kept step pins its model, so the holder keeps MAX_KEPT."""
    from persalign.engine import graphed_decode

    monkeypatch.setattr(graphed_decode, "MAX_KEPT", 2)
    graphs, prompts = GraphedDecodes(), prompts_of(policy, TEXTS)
    for rows in (1, 2, 1, 3):  # 1 is used again before 3 arrives: 2 is the least recently used
        assert graphs.decode_from(policy, prefill(policy, prompts[:rows]), greedy, 4) == \
            decode_from(policy, prefill(policy, prompts[:rows]), greedy, 4)
    assert sorted(key[1] for key in graphs.replayers) == [1, 3]

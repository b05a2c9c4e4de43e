"""The LM head over response positions in chunks (issue #73: memory) gives every row the whole product's floats.

`engine/scoring._logprobs_batch` held the float32 logits of every response position of a batch at once (and
their log-softmax): ~2 GB for a 16k-token scoring batch of SmolLM2's 49,152-token vocabulary, the largest
allocation of the shared ARGS pass and of the ICL cells. It now takes them `HEAD_ROWS` at a time, in near-equal
chunks; the numbers must not move by a bit, or the golden runs would.
"""

import numpy as np
import pytest
import torch

from persalign.engine import scoring
from persalign.engine.scoring import head_chunks, response_logprobs


def test_chunks_cover_every_row_once_and_never_leave_a_row_alone():
    for rows in [1, 2, 511, 512, 513, 1025, 1601, 4096, 5000]:
        chunks = head_chunks(rows)
        assert chunks[0][0] == 0 and chunks[-1][1] == rows
        assert all(end == start for (_, end), (start, _) in zip(chunks, chunks[1:]))
        assert all(0 < end - start <= scoring.HEAD_ROWS for start, end in chunks)
        assert rows <= scoring.HEAD_ROWS or min(end - start for start, end in chunks) >= scoring.HEAD_ROWS // 2


@pytest.mark.parametrize("rows", [257, 600, 1025, 1601])
def test_a_smollm2_sized_head_in_chunks_gives_the_whole_products_log_probs(rows):
    """SmolLM2-135M's head shape (576 -> 49,152) built in code: each row's log-prob, bit for bit."""
    torch.manual_seed(rows)
    head = torch.nn.Linear(576, 49152, bias=False)
    hidden, targets = torch.randn(rows, 576) * 3, torch.randint(0, 49152, (rows, 1))
    whole = torch.log_softmax(head(hidden).float(), dim=-1).gather(1, targets)
    chunked = torch.cat([torch.log_softmax(head(hidden[s:e]).float(), dim=-1).gather(1, targets[s:e])
                         for s, e in head_chunks(rows, 256)])
    assert torch.equal(whole, chunked)


def test_response_logprobs_are_the_same_with_small_chunks(tiny_lm, monkeypatch):
    rng = np.random.default_rng(0)
    vocab = len(tiny_lm.tokenizer) - 10
    prompts = [rng.integers(5, vocab, size=int(rng.integers(4, 12))).tolist() for _ in range(24)]
    responses = [rng.integers(5, vocab, size=int(rng.integers(20, 60))).tolist() for _ in range(24)]
    whole = response_logprobs(tiny_lm, prompts, responses, batch_size=24, token_budget=1 << 20)
    monkeypatch.setattr(scoring, "HEAD_ROWS", 100)  # ~900 response positions: 9-10 chunks
    seen = []  # rows of each head product: at most HEAD_ROWS (fails before: one product of every position)
    hook = tiny_lm.model.get_output_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    try:
        chunked = response_logprobs(tiny_lm, prompts, responses, batch_size=24, token_budget=1 << 20)
    finally:
        hook.remove()
    assert len(seen) >= 9 and max(seen) <= 100
    for a, b in zip(whole, chunked):
        np.testing.assert_array_equal(a, b)


def test_pdpo_scores_in_chunks_without_gradients_and_trains_in_one_product(tiny_lm, monkeypatch):
    """P-DPO's implicit rewards (no gradients) take the head in chunks with the same floats; its training keeps
    one product, since chunks would sum the head weight's gradient in another order (its trained numbers)."""
    from persalign.core.registry import METHODS
    from tests.method_settings import plain_settings

    method = METHODS.get("pdpo")(64, plain_settings("pdpo", batch_size=8, max_steps=1))
    rng = np.random.default_rng(1)
    vocab = len(tiny_lm.tokenizer) - 10
    prompts = [rng.integers(5, vocab, size=6).tolist() for _ in range(8)]
    responses = [rng.integers(5, vocab, size=40).tolist() for _ in range(8)]
    users = ["u"] * 8
    whole = method.implicit_rewards(tiny_lm, users, prompts, responses, batch_size=8)
    monkeypatch.setattr(scoring, "HEAD_ROWS", 50)
    seen = []
    hook = tiny_lm.model.get_output_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    try:
        chunked = method.implicit_rewards(tiny_lm, users, prompts, responses, batch_size=8)
        scored = max(seen)
        seen.clear()
        soft = method.soft_tokens(method.user_ids(users)).requires_grad_(True)
        method.sequence_logprobs(tiny_lm, soft, prompts, responses).sum().backward()
    finally:
        hook.remove()
    np.testing.assert_array_equal(whole, chunked)
    assert scored <= 50 and seen == [8 * 40]


def test_scoring_from_a_prefill_takes_one_group_at_a_time_with_one_forwards_floats(tiny_lm):
    """ICL's chosen and rejected responses continue the prompts' cache one group at a time (the cache held once,
    not once per group: ~1.9 GB of an ICL 8-shot cell's 2.5 GB), each padded to the longest of both, so each
    row's log-probs equal those of one forward of both groups (what the code before computed; fails before:
    one forward of 2 × 5 rows)."""
    from persalign.engine.decoding import prefill
    from persalign.engine.scoring import continue_from_prefill, logprobs_from_prefill
    from persalign.models.loading import decoder_stack

    rng = np.random.default_rng(2)
    vocab = len(tiny_lm.tokenizer) - 10
    prompts = [rng.integers(5, vocab, size=int(rng.integers(6, 20))).tolist() for _ in range(5)]
    groups = [[rng.integers(5, vocab, size=int(rng.integers(1, 12))).tolist() for _ in range(5)] for _ in range(2)]
    state = prefill(tiny_lm, prompts)
    both = [r for group in groups for r in group]
    hidden, first = continue_from_prefill(tiny_lm, state, [i % 5 for i in range(10)], both)  # one forward
    first = first.detach()
    head = tiny_lm.model.get_output_embeddings()
    expected = []
    for i, r in enumerate(both):
        tail = torch.log_softmax(head(hidden[i]).float(), dim=-1).detach()
        expected.append(np.array([float(first[i, r[0]])] + [float(tail[t, r[t + 1]]) for t in range(len(r) - 1)],
                                 dtype=np.float32))
    rows_seen = []
    hook = decoder_stack(tiny_lm.model).register_forward_pre_hook(
        lambda module, args, kwargs: rows_seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        got = logprobs_from_prefill(tiny_lm, prefill(tiny_lm, prompts), groups)
    finally:
        hook.remove()
    for a, b in zip(expected, got[0] + got[1]):
        np.testing.assert_array_equal(a, b)
    assert rows_seen and max(rows_seen) == 5

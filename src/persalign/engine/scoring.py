"""Teacher-forced log-probabilities of responses and the policy scoring functions.

One forward over `prompt + response` gives log π(y_t | x, y<t) for every
response token; the LM head is applied only at the response positions (the
vocabulary projection over the prompt would be wasted work). From these:

- s_base(y|x) = mean_t log π(y_t | x, y<t)                       (Eq. 4)
- s_ICL(y|x)  = mean_t log π(y_t | demos, x, y<t)                (Eq. 7)

s_ICL is s_base with the demonstrations in the prompt, so both use
`mean_logprob` with the prompt the decoder builds.
"""

from __future__ import annotations

import numpy as np
import torch

from persalign.engine.batching import map_batched, pass_limits
from persalign.models.loading import decoder_stack


def right_pad(sequences: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def response_logprobs(lm, prompts: list[list[int]], responses: list[list[int]], batch_size: int = 16,
                      token_budget: int | None = None) -> list[np.ndarray]:
    """log π(y_t | x, y<t) for each response token, one array per (prompt, response).

    Pairs are batched by length within a token budget (persalign.engine.batching; on CUDA sized to the free
    memory, `pass_limits`; `token_budget` overrides it); results keep the input order.
    """
    budget, cap = pass_limits(lm, batch_size, logits=True)
    pairs = list(zip(prompts, responses))
    return map_batched(pairs, [len(p) + len(r) for p, r in pairs], lambda batch: _logprobs_batch(lm, batch),
                       token_budget or budget, cap)


HEAD_ROWS = 512  # response positions per LM-head product: the float32 logits of a 16k-token batch held ~2 GB


def head_chunks(rows: int, size: int = HEAD_ROWS) -> list[tuple[int, int]]:
    """(start, end) of near-equal chunks of at most `size` rows. Equal chunks, never a remainder of one row:
    a one-row product takes another kernel (a matrix-vector one) whose sums differ in the last bits, while
    chunks of tens of rows or more give each row the whole product's floats (tests/test_scoring_chunks.py)."""
    parts = max(1, -(-rows // size))
    bounds = [rows * part // parts for part in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def picked_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log π(target | state) of each row of `hidden` (positions × width): the head's float32 logits, their
    log-softmax, the target's entry. Without gradients, `HEAD_ROWS` rows at a time; with them (P-DPO's training)
    in one product, since chunks would sum the head's weight gradient in another order."""
    chunks = head_chunks(len(hidden), HEAD_ROWS) if not torch.is_grad_enabled() else [(0, len(hidden))]
    return torch.cat([torch.log_softmax(head(hidden[start:end]).float(), dim=-1).gather(1, targets[start:end, None])
                      for start, end in chunks]).squeeze(1)


def _logprobs_batch(lm, batch: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
    backbone, head = decoder_stack(lm.model), lm.model.get_output_embeddings()
    ids, mask = right_pad([p + r for p, r in batch], lm.tokenizer.pad_token_id, lm.device)
    rows, cols = [], []
    for row, (p, r) in enumerate(batch):
        rows += [row] * len(r)
        cols += range(len(p) - 1, len(p) + len(r) - 1)  # the state before each response token
    if not rows:
        return [np.zeros(0, dtype=np.float32) for _ in batch]
    hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state[rows, cols]
    picked = picked_logprobs(head, hidden, ids[rows, [c + 1 for c in cols]]).cpu().numpy()
    out, offset = [], 0
    for _, r in batch:
        out.append(picked[offset : offset + len(r)])
        offset += len(r)
    return out


@torch.no_grad()
def continue_from_prefill(lm, state, prompt_rows: list[int], responses: list[list[int]], width: int | None = None):
    """Hidden states of each response appended to its prompt's prefill (the prompt is not recomputed).

    `prompt_rows[i]` is the prefill row that response i continues. The cache is cut back to the prompt
    (decoding may have grown it) and gathered per response; where the rows are the prefill's own, in order,
    the cut is a view, not a copy. `width`: the responses are padded to it (at least their longest).
    Returns (hidden (n, width, H), first-token log-probs (n, vocab)).
    """
    same_rows = prompt_rows == list(range(state.mask.shape[0]))
    index = torch.tensor(prompt_rows, device=lm.device)
    for layer in state.cache.layers:
        keys, values = layer.keys[:, :, : state.width], layer.values[:, :, : state.width]
        layer.keys, layer.values = (keys, values) if same_rows else (keys.index_select(0, index),
                                                                     values.index_select(0, index))
    width = max(width or 1, max(len(r) for r in responses))
    ids = torch.full((len(responses), width), lm.tokenizer.pad_token_id, dtype=torch.long, device=lm.device)
    cont_mask = torch.zeros((len(responses), width), dtype=state.mask.dtype, device=lm.device)
    for i, r in enumerate(responses):
        ids[i, : len(r)] = torch.tensor(r, device=lm.device)
        cont_mask[i, : len(r)] = 1
    positions = (state.positions[:, -1] + 1).index_select(0, index)[:, None] + torch.arange(width, device=lm.device)
    mask = torch.cat([state.mask.index_select(0, index), cont_mask], dim=1)
    hidden = decoder_stack_of(lm)(input_ids=ids, attention_mask=mask, position_ids=positions,
                                  past_key_values=state.cache, use_cache=True).last_hidden_state
    return hidden, None if state.logprobs is None else state.logprobs.index_select(0, index)


@torch.no_grad()
def logprobs_from_prefill(lm, state, groups: list[list[list[int]]]) -> list[list[np.ndarray]]:
    """log π(y_t | x, y<t) of several responses per prompt, reusing the prompts' prefill.

    `groups[g][row]` is the g-th response of prompt `row` (e.g. chosen, rejected). One group at a time, each
    padded to the longest response of all groups (each row's floats are those of one forward of every group:
    tests/test_scoring_chunks.py): the prompt's cache is held once, not once per group (an ICL 8-shot cell's
    scoring held 2 × 16 rows × ~1,300 tokens of keys and values, ~1.9 GB).
    """
    rows = state.mask.shape[0]
    width = max(1, max(len(r) for group in groups for r in group))
    head = lm.model.get_output_embeddings()
    out: list[list[np.ndarray]] = []
    for group in groups:
        hidden, first = continue_from_prefill(lm, state, list(range(rows)), group, width)
        out.append([_response_logprobs(head, hidden[i], first[i], r) for i, r in enumerate(group)])
    return out


def _response_logprobs(head, hidden: torch.Tensor, first: torch.Tensor, response: list[int]) -> np.ndarray:
    if not response:
        return np.zeros(0, dtype=np.float32)
    tail = torch.log_softmax(head(hidden[: len(response) - 1]).float(), dim=-1) if len(response) > 1 else None
    values = [first[response[0]]] + ([] if tail is None else list(tail[torch.arange(len(response) - 1), response[1:]]))
    return torch.stack(values).cpu().numpy()


def decoder_stack_of(lm):
    return decoder_stack(lm.model)


def mean_logprob(token_logprobs: np.ndarray) -> float:
    """Length-normalised log-likelihood (Eq. 4 / Eq. 7); -inf for an empty response."""
    return float(token_logprobs.mean()) if len(token_logprobs) else float("-inf")

"""Token-budget, length-sorted batching: one helper for the passes over many sequences of uneven length.

Batching in data order pads every batch to its longest member: on real
users' writing (median prompt 136 tokens, longest 1,677) that processes
2.37× the real tokens. Sorting by length first and filling each batch up to a
token budget keeps the padding small and the memory bounded: a batch holds
as many items as fit `budget` padded tokens, where a row of width L costs
L · (1 + L / ATTENTION_WIDTH) (the attention scores grow with L², the
projections with L; for a d-wide model they are equal near L = 6d, and
4,096 is that point for the 0.5B-class models). `max_items` (the config's
batch_size) stays an upper bound. Results come back in the original order
(lm-evaluation-harness sorts its requests by length for the same reason).

    python -c "from persalign.engine.batching import plan_batches; print(plan_batches([5, 50, 7, 48], budget=120))"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

ATTENTION_WIDTH = 4096
# Padded tokens per forward. CPU: 16,384 by measurement (docs/benchmarks.md): at 4,096 a batch held
# 5 ICL 8-shot prompts and generation was 8 % slower than 16-row data-order batches (decoding on a
# CPU is per-step-overhead bound); at 16,384 it is 11 % faster, still below their peak memory.
DEFAULT_BUDGET = {"cpu": 16384, "cuda": 65536, "mps": 16384}

T = TypeVar("T")


def default_budget(device: str | torch.device) -> int:
    return DEFAULT_BUDGET.get(torch.device(device).type, DEFAULT_BUDGET["cpu"])


GPU_MEMORY_SHARE = 0.5  # of the free GPU memory one scoring or feature forward may fill
GPU_BUDGET_RANGE = (1024, 1 << 20)  # tokens: at least a long prompt's row, at most what one forward needs


def bytes_per_token(config, dtype_bytes: int, logits: bool) -> float:
    """What a no-grad forward holds per token at its peak: a few copies of the residual stream, the MLP's
    intermediate (gate and up), the KV the prefill keeps (the feature pass continues from it) and, where
    log-probabilities are taken, the float32 logits and their log-softmax (an upper bound: only response
    positions get them)."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = 2 * config.num_hidden_layers * getattr(config, "num_key_value_heads", heads) * head_dim
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
    return dtype_bytes * (4 * hidden + 2 * intermediate + kv) + (8 * config.vocab_size if logits else 0)


def pass_limits(lm, batch_size: int | None, logits: bool) -> tuple[int, int | None]:
    """(token budget, row cap) of a scoring or feature pass. CPU (and any device but CUDA): the measured
    budget and the config's batch size, unchanged (the CPU's numbers). CUDA: the tokens half of the free
    memory holds (`bytes_per_token`) and no row cap: a 16-row cap left an H200 forward at ~1,600 tokens."""
    device = torch.device(lm.device)
    if device.type != "cuda":
        return default_budget(device), batch_size
    free, _ = torch.cuda.mem_get_info(device)
    per_token = bytes_per_token(lm.model.config, lm.model.dtype.itemsize, logits)
    low, high = GPU_BUDGET_RANGE
    return int(min(high, max(low, GPU_MEMORY_SHARE * free / per_token))), None


def row_cost(width: int) -> float:
    return width * (1 + width / ATTENTION_WIDTH)


def plan_batches(lengths: Sequence[int], budget: int, max_items: int | None = None,
                 same_length: bool = False, groups: Sequence | None = None) -> list[list[int]]:
    """Indices grouped into batches: shortest first, each within `budget` padded cost and `max_items` rows.

    An item longer than the budget on its own gets a batch to itself (it is never dropped).
    `same_length`: a batch holds items of one length only, so nothing is padded and each row's
    result is the same whatever else shares its batch (on CPU a row's float result depends on
    the padding around it, not on how many rows there are).
    `groups`: items are taken group by group (shortest first within each), so a group's items
    share as few batches as the budget allows (ICL's per-user prefix cache).
    """
    group_of = (lambda i: str(groups[i])) if groups is not None else (lambda i: "")
    order = sorted(range(len(lengths)), key=lambda i: (group_of(i), lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = max([lengths[i] for i in current] + [lengths[index]])  # sorted: the newcomer is the widest
        too_costly = (len(current) + 1) * row_cost(width) > budget
        too_many = max_items is not None and len(current) >= max_items
        new_length = same_length and bool(current) and lengths[current[-1]] != lengths[index]
        if current and (too_costly or too_many or new_length):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def map_batched(items: Sequence[T], lengths: Sequence[int], run_batch: Callable[[list[T]], list],
                budget: int, max_items: int | None = None) -> list:
    """`run_batch` over token-budget batches of `items`; one result per item, in the original order."""
    results: list = [None] * len(items)
    for batch in plan_batches(lengths, budget, max_items):
        for index, result in zip(batch, run_batch([items[i] for i in batch])):
            results[index] = result
    return results


FIXED_GROUP = 8  # items per fixed group: not a setting, so no setting (batch size) can move a result


def fixed_groups(items: Sequence[T], size: int = FIXED_GROUP) -> list[list[T]]:
    """`items` in data order, `size` at a time: for work whose result must not depend on any plan
    or setting (Best-of-N's samples, the generation metrics' forwards)."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def plan_generation(prompts: Sequence[Sequence[int]], generation, device, groups: Sequence | None = None,
                    max_items: int | None = None) -> list[list[int]]:
    """Batches for decoding `prompts`: a row costs its prompt plus the tokens it may generate.

    `generation` is the run's GenerationConfig (max_new_tokens, token_budget, batch_size). Every
    decoding pass (cells, the λ choice, the win rate's zero-shot outputs) plans with this one rule,
    so the same prompts are always decoded in the same batches.
    """
    lengths = [len(p) + generation.max_new_tokens for p in prompts]
    return plan_batches(lengths, generation.token_budget or default_budget(device),
                        max_items or generation.batch_size, groups=groups)


def padding_ratio(lengths: Sequence[int], batches: list[list[int]]) -> float:
    """Processed (padded) tokens ÷ real tokens of a batching: 1.0 means no padding."""
    real = sum(lengths)
    processed = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return processed / real if real else 1.0

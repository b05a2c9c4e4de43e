"""Batched token-by-token decoding with KV cache, and the greedy decoder.

`decode(lm, prompts, choose_next, ...)` left-pads the prompts, prefills once,
then at each step asks `choose_next(logprobs, step)` for one token per row.
Greedy takes the argmax; ARGS (reward-guided) plugs in its own chooser. Each
row stops at its own end: an end/special token, or a newline once the row has
written something (leading blank lines are skipped, not taken as the end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class TokenClasses:
    """Per-vocabulary flags: which tokens end a row, which are only whitespace."""

    stop: torch.Tensor  # special tokens (EOS, end of turn, ...)
    newline: torch.Tensor  # tokens whose text contains a newline
    blank: torch.Tensor  # tokens whose text is whitespace only


@lru_cache(maxsize=8)
def _classes(tokenizer, vocab_size: int) -> TokenClasses:
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    texts += [""] * (vocab_size - len(texts))  # model heads may be padded past the tokenizer
    stop = torch.zeros(vocab_size, dtype=torch.bool)
    stop[[i for i in tokenizer.all_special_ids if i < vocab_size]] = True
    stop[len(tokenizer):] = True
    newline = torch.tensor(["\n" in t for t in texts])
    blank = torch.tensor([t.strip() == "" for t in texts])
    return TokenClasses(stop, newline, blank)


def token_classes(tokenizer, vocab_size: int) -> TokenClasses:
    return _classes(tokenizer, vocab_size)


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids) with prompts aligned on the right."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


ChooseNext = Callable[[torch.Tensor, int], torch.Tensor]


class RowTracker:
    """Per-row generated tokens and stopping (shared by greedy and ARGS decoding)."""

    def __init__(self, tokenizer, vocab_size: int, rows: int, device):
        classes = token_classes(tokenizer, vocab_size)
        self.stop, self.newline, self.blank = (t.to(device) for t in (classes.stop, classes.newline, classes.blank))
        self.pad_id = tokenizer.pad_token_id
        self.generated: list[list[int]] = [[] for _ in range(rows)]
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.has_text = torch.zeros(rows, dtype=torch.bool, device=device)

    def push(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Record one token for each of `rows` (default: all); returns the tokens to feed next
        (pad for finished rows)."""
        rows = torch.arange(len(self.generated), device=tokens.device) if rows is None else rows
        finished, has_text = self.finished[rows], self.has_text[rows]
        ends = self.stop[tokens] | (self.newline[tokens] & has_text)
        for i in torch.nonzero(~finished & ~ends).flatten().tolist():
            self.generated[int(rows[i])].append(int(tokens[i]))
        self.finished[rows] = finished | ends
        self.has_text[rows] = has_text | ~self.blank[tokens]
        return torch.where(self.finished[rows], torch.full_like(tokens, self.pad_id), tokens)

    @property
    def done(self) -> bool:
        return bool(self.finished.all())


def extend_mask(mask: torch.Tensor) -> torch.Tensor:
    return torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=mask.device)], dim=1)


@dataclass
class Prefill:
    """The state after one forward over left-padded prompts: reused by decoding and scoring."""

    mask: torch.Tensor
    positions: torch.Tensor
    cache: object
    logprobs: torch.Tensor | None  # (rows, vocab) log π(· | prompt); None for a backbone-only prefill
    width: int  # padded prompt length


@torch.no_grad()
def prefill(lm, prompts: list[list[int]]) -> Prefill:
    ids, mask, positions = left_pad(prompts, lm.tokenizer.pad_token_id, lm.device)
    out = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    return Prefill(mask, positions, out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), dim=-1),
                   ids.shape[1])


@torch.no_grad()
def decode_from(lm, state: Prefill, choose_next: ChooseNext, max_new_tokens: int) -> list[list[int]]:
    """Decode from a prefill; the cache grows (crop it to `state.width` to reuse the prompt). A policy whose
    `graphs` holder is set (generation.cuda_graph) decodes on its captured step instead: the same tokens
    (engine/graphed_decode.py), its prefill's cache left as it was."""
    if getattr(lm, "graphs", None) is not None:
        return lm.graphs.decode_from(lm, state, choose_next, max_new_tokens)
    mask, logprobs = state.mask, state.logprobs
    rows = RowTracker(lm.tokenizer, logprobs.shape[-1], mask.shape[0], lm.device)
    next_pos = state.positions[:, -1] + 1
    for step in range(max_new_tokens):
        tokens = rows.push(choose_next(logprobs, step))
        if rows.done or step == max_new_tokens - 1:
            break
        mask = extend_mask(mask)
        out = lm.model(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       past_key_values=state.cache, use_cache=True)
        logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        next_pos = next_pos + 1
    return rows.generated


def decode(lm, prompts: list[list[int]], choose_next: ChooseNext, max_new_tokens: int) -> list[list[int]]:
    """Generate for every prompt; returns the new token ids of each row (stop token excluded)."""
    return decode_from(lm, prefill(lm, prompts), choose_next, max_new_tokens)


def clean_generation(tokenizer, ids: list[int]) -> str:
    """The first non-blank line of a generation, stripped."""
    text = tokenizer.decode(ids, skip_special_tokens=True).strip()
    return text.split("\n", 1)[0].strip()


def greedy(logprobs: torch.Tensor, step: int) -> torch.Tensor:
    return logprobs.argmax(dim=-1)


def generate_texts(lm, prompts: list[list[int]], max_new_tokens: int, choose_next: ChooseNext = greedy) -> list[str]:
    """Decode and clean: the first non-blank line of each row, stripped."""
    return [clean_generation(lm.tokenizer, ids) for ids in decode(lm, prompts, choose_next, max_new_tokens)]

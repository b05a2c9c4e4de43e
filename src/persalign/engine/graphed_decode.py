"""The policy's own decode step on fixed-size buffers, captured once as a CUDA graph (issue #76): greedy, ICL and
ICL-RAG (greedy from their prefills), Best-of-N's sampling, RL's evaluation decodes (each user's tuned policy),
any `choose_next` of engine/decoding.py. RL training's own sampling runs inside TRL's GRPO, not here.

`decoding.decode_from` runs one forward per generated token on a cache that grows, so on a GPU every step pays
the launch of each of the model's kernels again (on an H200 greedy ran 6-7x slower than ARGS's captured step).
Here the step — the forward of one token per row, its log-softmax — reads and writes fixed buffers: the prompt's
keys and values are copied into a `SlotCache` sized to a multiple of SLOT_BUCKET slots, the write slot and the
positions are device tensors, and attention reads every slot under an additive mask. `Replayer` runs the first
step eagerly (work metered), captures the second on CUDA and replays the rest. The choice of the next token is
the eager loop's own `choose_next`, run between steps (greedy's argmax, the seeded per-row samplers of
Best-of-N: the same tokens from the same log-probs), and `RowTracker` stops rows as the eager loop does; a
finished row is fed the pad token there as here.

What differs from the eager loop: attention sums over every slot under a mask, so floats can differ in their
last bits (float32: the same tokens in tests/test_graphed_decode.py; bf16: near-ties may part, as a change of
batch does). The prefill's own cache is copied, not extended, so scoring from the same prefill reads the prompt
as before. Off CUDA the same step runs uncaptured; a run takes this path only where `generation.cuda_graph` is
on (default off: the CPU's numbers are the eager loop's).

    pytest tests/test_graphed_decode.py
    persalign run demo generation.cuda_graph=true device=cuda
"""

from __future__ import annotations

import torch

from persalign.engine.decoding import ChooseNext, Prefill, RowTracker
from persalign.engine.step_graph import SLOT_BUCKET, Replayer, SlotCache, additive


class StaticDecodeStep:
    """The buffers of a graphed decode and its one step: `tokens` in, `logprobs` out (every tensor keeps its
    address across steps and decodes; `load` copies a new decode's prefill into them)."""

    def __init__(self, lm, state: Prefill, slots: int):
        self.lm, device, rows = lm, state.mask.device, state.mask.shape[0]
        self.dtype = lm.model.get_input_embeddings().weight.dtype
        self.slot = torch.tensor(state.width, device=device)
        self.cache = SlotCache(state.cache, slots, self.slot)
        self.slots = torch.arange(slots, device=device)
        self.valid = torch.ones((rows, slots), dtype=torch.bool, device=device)
        self.next_pos = torch.zeros(rows, dtype=torch.long, device=device)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.logprobs = state.logprobs.clone()
        self.load(state)

    def load(self, state: Prefill) -> None:
        self.slot.fill_(state.width)
        self.cache.load(state.cache)
        self.valid.fill_(True)
        self.valid[:, : state.width].copy_(state.mask.bool())
        self.next_pos.copy_(state.positions[:, -1] + 1)
        self.logprobs.copy_(state.logprobs)

    def step(self) -> None:
        sees = additive((self.valid & (self.slots <= self.slot))[:, None, None, :], self.dtype)
        out = self.lm.model(input_ids=self.tokens[:, None], attention_mask=sees, position_ids=self.next_pos[:, None],
                            past_key_values=self.cache, use_cache=True)
        self.logprobs.copy_(torch.log_softmax(out.logits[:, -1].float(), dim=-1))
        self.next_pos.add_(1)
        self.slot.add_(1)


MAX_KEPT = 8  # captured steps kept: RL's evaluation decodes one merged model per user, each would pin its model


class GraphedDecodes:
    """A policy's graphed decodes, keeping their captured steps: one per (model, rows, slot bucket), at most
    MAX_KEPT, the least recently used dropped first."""

    def __init__(self, meter=None):
        self.replayers: dict[tuple, Replayer] = {}  # each holds its model, so the id in its key stays its own
        self.meter = meter  # the policy's WorkMeter, or None

    def replayer(self, lm, state: Prefill, max_new_tokens: int) -> Replayer:
        slots = -(-(state.width + max_new_tokens) // SLOT_BUCKET) * SLOT_BUCKET
        key = (id(lm.model), state.mask.shape[0], slots)
        replayer = self.replayers.pop(key, None)
        if replayer is None:
            replayer = Replayer(StaticDecodeStep(lm, state, slots), self.meter)
            while len(self.replayers) >= MAX_KEPT:  # the least recently used step (and the model it holds) goes
                self.replayers.pop(next(iter(self.replayers)))
        else:
            replayer.state.load(state)
        self.replayers[key] = replayer  # most recently used last
        return replayer

    @torch.no_grad()
    def decode_from(self, lm, state: Prefill, choose_next: ChooseNext, max_new_tokens: int) -> list[list[int]]:
        """`decoding.decode_from`'s tokens, each forward a replay of the captured step."""
        if state.logprobs is None:
            raise ValueError("a graphed decode needs a prefill with the next-token log-probs")
        replayer = self.replayer(lm, state, max_new_tokens)
        static = replayer.state
        rows = RowTracker(lm.tokenizer, state.logprobs.shape[-1], state.mask.shape[0], lm.device)
        logprobs = state.logprobs
        for step in range(max_new_tokens):
            tokens = rows.push(choose_next(logprobs, step))
            if rows.done or step == max_new_tokens - 1:
                break
            static.tokens.copy_(tokens)
            replayer.step()
            logprobs = static.logprobs
        return rows.generated

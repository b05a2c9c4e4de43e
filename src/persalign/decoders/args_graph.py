"""ARGS's decode step on fixed-size buffers, captured once as a CUDA graph (paper Eq. 1; issue #55).

At batch 1 a GPU decode step of a 0.5B-7B model is not arithmetic but launch overhead: on an H200 one step
of persalign's eager loop cost 40-90 ms whatever the model size, and the reference design's extra work (k
prefills, k cache copies) hid in it. This module runs the same step as `args_decoding.args_decode`'s
`TreeScorer` path — top-k of log π, the k candidates' tree forward on the RM's cache, the choice
argmax(log π + λ·r), the chosen candidate's KV entry kept, the policy's forward of that token — on buffers
whose shapes never change (`SlotCache`: keys and values of every slot a decode can reach; the write slot
and positions are device tensors), so one capture replays every step. On CUDA the first step runs eagerly
(the warm-up), the second is captured, and every later step is one `graph.replay()`; elsewhere the same
step runs uncaptured (how the CPU suite checks it against `args_decode`).

What differs from the eager loop: finished rows are not dropped (fixed shapes) but computed and ignored;
attention reads every slot under a mask, so floats can differ from the eager loop in their last bits
(float32: the same tokens in the tests; bf16: near-ties may part, as with a change of batch). Only a
sequence-level RM on its own backbone (the paper's setting: a 0.5B RM beside each policy) takes this path;
`graphed_args_decode` refuses the others. No step trace is recorded.

    pytest tests/test_args_graph.py
    python benchmarks/bench_gpu.py --archs tiny --batches 1 4 --max-new 4   # stage args_graph
"""

from __future__ import annotations

import torch

from persalign.core.errors import ConfigError
from persalign.decoders.args_decoding import check_same_tokenizer
from persalign.decoders.args_scorers import RewardGuide, TreeScorer, make_scorer
from persalign.engine.decoding import RowTracker, left_pad


class SlotCache:
    """A KV cache of fixed-size buffers (rows, heads, slots, dim) per layer; a forward of n tokens writes
    them at slots write_at .. write_at + n - 1 (`write_at`: a device tensor, so a captured step can move it).
    Filled from a prefill's DynamicCache; the model reads every slot, and the attention mask says which count."""

    def __init__(self, prefill_cache, slots: int, write_at: torch.Tensor):
        self.keys, self.values, self.write_at = [], [], write_at
        for layer in prefill_cache.layers:
            rows, heads, width, dim = layer.keys.shape
            for store, filled in ((self.keys, layer.keys), (self.values, layer.values)):
                buffer = torch.zeros((rows, heads, slots, dim), dtype=filled.dtype, device=filled.device)
                buffer[:, :, :width] = filled
                store.append(buffer)

    def update(self, key_states, value_states, layer_idx: int, cache_kwargs=None):
        index = self.write_at + torch.arange(key_states.shape[-2], device=key_states.device)
        self.keys[layer_idx].index_copy_(2, index, key_states)
        self.values[layer_idx].index_copy_(2, index, value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]

    def keep(self, slot: torch.Tensor, choice: torch.Tensor) -> None:
        """Each row's chosen candidate (written at slot + choice) moves to `slot`; the others go stale."""
        rows = torch.arange(choice.shape[0], device=choice.device)
        for tensor in self.keys + self.values:
            tensor[rows, :, slot.expand_as(choice)] = tensor[rows, :, slot + choice]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Booleans -> 0 / dtype minimum (eager attention adds a 4D mask; SDPA takes it as given)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed,
                                                                                      torch.finfo(dtype).min)


class StaticArgsStep:
    """The state of a graphed ARGS decode and its one step (every tensor keeps its address across steps)."""

    def __init__(self, policy, guide: RewardGuide, scorer: TreeScorer, start: dict):
        self.policy, self.guide, self.scorer = policy, guide, scorer
        self.rm_dtype = scorer.backbone.get_input_embeddings().weight.dtype
        self.policy_dtype = policy.model.get_input_embeddings().weight.dtype
        self.vocab = len(policy.tokenizer)
        for name, value in start.items():  # slot, next_pos, logprobs, users, lams, valid, total, count
            setattr(self, name, value)
        width, new, k = self.valid.shape[1], start["max_new"], guide.top_k
        self.policy_cache = SlotCache(start["policy_cache"], width + new, self.slot)
        self.rm_cache = SlotCache(scorer.cache, width + new + k, self.slot)
        self.slots = torch.arange(width + new + k, device=self.slot.device)
        self.candidate_slots = torch.arange(k, device=self.slot.device)
        self.valid = torch.cat([self.valid.bool(), torch.ones((self.valid.shape[0], new + k), dtype=torch.bool,
                                                              device=self.slot.device)], dim=1)
        self.tokens = torch.zeros(self.valid.shape[0], dtype=torch.long, device=self.slot.device)

    def tree_mask(self) -> torch.Tensor:
        """(rows, 1, k, slots): candidate j sees the row's prefix (slots < slot) and its own slot, slot + j."""
        prefix = (self.valid & (self.slots < self.slot))[:, None, None, :]
        own = self.slots[None, None, None, :] == (self.slot + self.candidate_slots)[None, None, :, None]
        return additive(prefix | own, self.rm_dtype)

    def step(self) -> None:
        guide, rows = self.guide, self.valid.shape[0]
        top_logprobs, candidates = self.logprobs[:, : self.vocab].topk(guide.top_k, dim=-1)
        states = self.scorer.backbone(input_ids=candidates, attention_mask=self.tree_mask(),
                                      position_ids=self.next_pos[:, None].expand(rows, guide.top_k),
                                      past_key_values=self.rm_cache, use_cache=True).last_hidden_state
        rewards = guide.method.token_rewards(states.float(), self.users)
        prefix = self.pool_extend(rewards)
        choice = (top_logprobs + self.lams[:, None] * prefix).argmax(dim=-1)
        self.total.add_(rewards.gather(1, choice[:, None]).squeeze(1))
        self.count.add_(1)
        self.rm_cache.keep(self.slot, choice)
        self.tokens.copy_(candidates.gather(1, choice[:, None]).squeeze(1))
        sees = additive((self.valid & (self.slots <= self.slot))[:, None, None, : self.policy_slots], self.policy_dtype)
        out = self.policy.model(input_ids=self.tokens[:, None], attention_mask=sees,
                                position_ids=self.next_pos[:, None], past_key_values=self.policy_cache, use_cache=True)
        self.logprobs.copy_(torch.log_softmax(out.logits[:, -1].float(), dim=-1))
        self.next_pos.add_(1)
        self.slot.add_(1)

    @property
    def policy_slots(self) -> int:
        return self.policy_cache.keys[0].shape[2]

    def pool_extend(self, rewards: torch.Tensor) -> torch.Tensor:
        """`PoolingState.extend` on the in-place running total and count."""
        pooling = self.guide.method.pooling
        if pooling == "last":
            return rewards
        if pooling == "sum":
            return self.total[:, None] + rewards
        return (self.total[:, None] + rewards) / (self.count[:, None] + 1)


def check_graphable(policy, guide: RewardGuide, scorer) -> None:
    if not isinstance(scorer, TreeScorer) or scorer.shared:
        raise ConfigError("a graphed ARGS step needs a sequence-level reward model on its own backbone (the paper's "
                          "setting); token-level, text-level and shared-backbone RMs decode with the eager loop")
    if guide.lm.device != policy.device:
        raise ConfigError(f"a graphed ARGS step needs the policy and the reward backbone on one device "
                          f"({policy.device} and {guide.lm.device})")


def start_state(policy, guide: RewardGuide, scorer, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """The prefill (the eager loop's own, so prompts are read identically) and the buffers the step moves."""
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    policy_cache, logprobs = scorer.prefill(ids, mask, positions)
    rows = len(prompts)
    return {"policy_cache": policy_cache, "logprobs": logprobs.clone(), "valid": mask, "max_new": max_new_tokens,
            "slot": torch.tensor(ids.shape[1], device=policy.device), "next_pos": positions[:, -1] + 1,
            "users": guide.method.user_ids(guide.users).to(policy.device),
            "lams": torch.as_tensor(guide.lam, dtype=torch.float32, device=policy.device).expand(rows).clone(),
            "total": torch.zeros(rows, device=policy.device), "count": torch.zeros(rows, device=policy.device)}


def replayer(state: StaticArgsStep):
    """A function running one step: on CUDA the eager warm-up first, then one captured graph replayed."""
    if state.slot.device.type != "cuda":
        return state.step
    graph, calls = torch.cuda.CUDAGraph(), [0]

    def run() -> None:
        calls[0] += 1
        if calls[0] == 1:
            state.step()  # warm-up: a real step, eager (kernels chosen, workspaces allocated)
            torch.cuda.synchronize(state.slot.device)
            with torch.cuda.graph(graph):  # recorded, not run: the state is still after step 1
                state.step()
            return
        graph.replay()

    return run


@torch.no_grad()
def graphed_args_decode(policy, guide: RewardGuide, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """`args_decode` with a sequence-level RM on its own backbone, one captured step replayed (see the module)."""
    check_same_tokenizer(policy.tokenizer, guide.lm.tokenizer)
    guide.method.bind(guide.lm)
    scorer = make_scorer(policy, guide, prompts)
    check_graphable(policy, guide, scorer)
    state = StaticArgsStep(policy, guide, scorer, start_state(policy, guide, scorer, prompts, max_new_tokens))
    step, rows = replayer(state), RowTracker(policy.tokenizer, state.logprobs.shape[-1], len(prompts), policy.device)
    for _ in range(max_new_tokens):
        step()
        rows.push(state.tokens.clone())
        if rows.done:
            break
    return rows.generated

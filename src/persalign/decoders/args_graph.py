"""ARGS's decode step on fixed-size buffers, captured once as a CUDA graph (paper Eq. 1; issue #55).

At batch 1 a GPU decode step of a 0.5B-7B model is not arithmetic but launch overhead: on an H200 one step
of persalign's eager loop cost 40-90 ms whatever the model size, and the reference design's extra work (k
prefills, k cache copies) hid in it. This module runs the same step as `args_decoding.args_decode`'s
`TreeScorer` path — top-k of log π, the k candidates' tree forward on the RM's cache, the choice
argmax(log π + λ·r), the chosen candidate's KV entry kept, the policy's forward of that token — on buffers
whose shapes never change (`SlotCache`: keys and values of every slot a decode can reach; the write slot
and positions are device tensors), so one capture replays every step. On CUDA the first step of a shape
runs eagerly (the warm-up), the second is captured, and every later step is one `graph.replay()`; a
`GraphedArgs` keeps its captured steps, one per (models, method, rows, k, slot bucket: caches are sized
to a multiple of SLOT_BUCKET), so later decodes of that shape load their prefill into the same buffers
and replay from their first step. Elsewhere the same step runs uncaptured (how the CPU suite checks it
against `args_decode`).

Measured on an H200 (docs/scale-out.md): 3.4-9.6x the reference design's prompts/s at batch 1 (the eager
loop: 0.9-1.1x), 41-147x at batch 16.

What differs from the eager loop: finished rows are not dropped (fixed shapes) but computed and ignored
(a run's counted work is the algorithm's, as for the eager loop: ARGS's candidate forwards per token);
attention reads every slot under a mask, so floats can differ from the eager loop in their last bits
(float32: the same tokens in the tests; bf16: near-ties may part, as with a change of batch). Only a
sequence-level RM on its own backbone (the paper's setting: a 0.5B RM beside each policy) takes this path;
`GraphedArgs.decode` refuses the others, and a run with `args.cuda_graph: true` decodes them eagerly. In a
run both the query batches and the λ choice's grid (a λ per row) take it; the λ = 0 validation decodes shared
by every method stay eager. No step trace is recorded.

    pytest tests/test_args_graph.py
    python benchmarks/bench_gpu.py --archs tiny --batches 1 4 --max-new 4   # stage args_graph
"""

from __future__ import annotations

import torch

from persalign.core.errors import ConfigError
from persalign.decoders.args_decoding import args_decode, check_same_tokenizer
from persalign.decoders.args_scorers import RewardGuide, make_scorer
from persalign.engine.decoding import RowTracker, left_pad
from persalign.engine.step_graph import SLOT_BUCKET, Replayer, SlotCache, additive  # noqa: F401  (re-exported)


LOADED = ("logprobs", "slot", "next_pos", "users", "lams", "total", "count")  # a decode's start, copied in place


class StaticArgsStep:
    """The buffers of a graphed ARGS decode and its one step (every tensor keeps its address across steps
    and decodes: `load` copies a new decode's start into them)."""

    def __init__(self, policy, guide: RewardGuide, backbone, start: dict, slots: int):
        self.policy, self.method, self.backbone, self.top_k = policy, guide.method, backbone, guide.top_k
        self.rm_dtype = backbone.get_input_embeddings().weight.dtype
        self.policy_dtype = policy.model.get_input_embeddings().weight.dtype
        self.vocab = len(policy.tokenizer)
        for name in LOADED:
            setattr(self, name, start[name].clone())
        device, rows = self.slot.device, start["valid"].shape[0]
        self.policy_cache = SlotCache(start["policy_cache"], slots, self.slot)
        self.rm_cache = SlotCache(start["rm_cache"], slots, self.slot)
        self.slots = torch.arange(slots, device=device)
        self.candidate_slots = torch.arange(self.top_k, device=device)
        self.valid = torch.ones((rows, slots), dtype=torch.bool, device=device)
        self.valid[:, : start["valid"].shape[1]] = start["valid"].bool()
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)

    def load(self, start: dict) -> None:
        for name in LOADED:
            getattr(self, name).copy_(start[name])
        self.policy_cache.load(start["policy_cache"])
        self.rm_cache.load(start["rm_cache"])
        self.valid.fill_(True)
        self.valid[:, : start["valid"].shape[1]].copy_(start["valid"].bool())

    def tree_mask(self) -> torch.Tensor:
        """(rows, 1, k, slots): candidate j sees the row's prefix (slots < slot) and its own slot, slot + j."""
        prefix = (self.valid & (self.slots < self.slot))[:, None, None, :]
        own = self.slots[None, None, None, :] == (self.slot + self.candidate_slots)[None, None, :, None]
        return additive(prefix | own, self.rm_dtype)

    def step(self) -> None:
        rows = self.valid.shape[0]
        top_logprobs, candidates = self.logprobs[:, : self.vocab].topk(self.top_k, dim=-1)
        states = self.backbone(input_ids=candidates, attention_mask=self.tree_mask(),
                               position_ids=self.next_pos[:, None].expand(rows, self.top_k),
                               past_key_values=self.rm_cache, use_cache=True).last_hidden_state
        rewards = self.method.token_rewards(states.float(), self.users)
        choice = (top_logprobs + self.lams[:, None] * self.pool_extend(rewards)).argmax(dim=-1)
        self.total.add_(rewards.gather(1, choice[:, None]).squeeze(1))
        self.count.add_(1)
        self.rm_cache.keep(self.slot, choice)
        self.tokens.copy_(candidates.gather(1, choice[:, None]).squeeze(1))
        sees = additive((self.valid & (self.slots <= self.slot))[:, None, None, :], self.policy_dtype)
        out = self.policy.model(input_ids=self.tokens[:, None], attention_mask=sees,
                                position_ids=self.next_pos[:, None], past_key_values=self.policy_cache, use_cache=True)
        self.logprobs.copy_(torch.log_softmax(out.logits[:, -1].float(), dim=-1))
        self.next_pos.add_(1)
        self.slot.add_(1)

    def pool_extend(self, rewards: torch.Tensor) -> torch.Tensor:
        """`PoolingState.extend` on the in-place running total and count."""
        pooling = self.method.pooling
        if pooling == "last":
            return rewards
        if pooling == "sum":
            return self.total[:, None] + rewards
        return (self.total[:, None] + rewards) / (self.count[:, None] + 1)


def not_graphable(policy, guide: RewardGuide) -> str | None:
    """Why this policy and RM cannot take the graphed step (None: they can)."""
    if getattr(guide.method, "text_level", False) or guide.method.token_level or guide.lm.model is policy.model:
        return ("a graphed ARGS step needs a sequence-level reward model on its own backbone (the paper's setting); "
                "token-level, text-level and shared-backbone RMs decode with the eager loop")
    if guide.lm.device != policy.device:
        return f"a graphed ARGS step needs the policy and the reward backbone on one device ({policy.device} and " \
               f"{guide.lm.device})"
    return None


def start_state(policy, guide: RewardGuide, scorer, prompts: list[list[int]]) -> dict:
    """The prefill (the eager loop's own, so prompts are read identically) and where the first step starts."""
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    policy_cache, logprobs = scorer.prefill(ids, mask, positions)
    rows, device = len(prompts), policy.device
    return {"policy_cache": policy_cache, "rm_cache": scorer.cache, "logprobs": logprobs, "valid": mask,
            "slot": torch.tensor(ids.shape[1], device=device), "next_pos": positions[:, -1] + 1,
            "users": guide.method.user_ids(guide.users).to(device),
            "lams": torch.as_tensor(guide.lam, dtype=torch.float32, device=device).expand(rows),
            "total": torch.zeros(rows, device=device), "count": torch.zeros(rows, device=device)}


class GraphedArgs:
    """ARGS decodes that keep their captured steps: one per (policy, RM, method, rows, k, slot bucket)."""

    def __init__(self, meter=None):
        self.replayers: dict[tuple, Replayer] = {}  # each holds its models, so the ids in its key stay theirs
        self.meter = meter  # the run's WorkMeter (watching both models), or None

    @torch.no_grad()
    def decode(self, policy, guide: RewardGuide, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """`args_decode`'s tokens for a sequence-level RM on its own backbone (see the module)."""
        if (reason := not_graphable(policy, guide)) is not None:
            raise ConfigError(reason)
        check_same_tokenizer(policy.tokenizer, guide.lm.tokenizer)
        guide.method.bind(guide.lm)
        scorer = make_scorer(policy, guide, prompts)
        start = start_state(policy, guide, scorer, prompts)
        needed = int(start["slot"]) + max_new_tokens + guide.top_k
        slots = -(-needed // SLOT_BUCKET) * SLOT_BUCKET
        key = (id(policy.model), id(scorer.backbone), id(guide.method), len(prompts), guide.top_k, slots)
        replayer = self.replayers.get(key)
        if replayer is None:
            state = StaticArgsStep(policy, guide, scorer.backbone, start, slots)
            replayer = self.replayers[key] = Replayer(state, self.meter)
        else:
            replayer.state.load(start)
        rows = RowTracker(policy.tokenizer, start["logprobs"].shape[-1], len(prompts), policy.device)
        for _ in range(max_new_tokens):
            replayer.step()
            rows.push(replayer.state.tokens.clone())
            if rows.done:
                break
        return rows.generated


def args_decode_graphed_where_possible(graphs: GraphedArgs | None, policy, guide: RewardGuide,
                                       prompts: list[list[int]], max_new_tokens: int, record=None) -> list[list[int]]:
    """A run's ARGS decode: `graphs.decode` where `args.cuda_graph` gave a holder and the RM can take the graphed
    step, else the eager `args_decode` (with its `record`)."""
    if graphs is not None and not_graphable(policy, guide) is None:
        return graphs.decode(policy, guide, prompts, max_new_tokens)
    return args_decode(policy, guide, prompts, max_new_tokens, record)

"""One ARGS pass for many reward heads over the shared frozen backbone (paper Eq. 1; issue #42).

In `reward.mode: frozen` every sequence-level reward method is a small head over the policy's own
states, so ARGS's expensive step — the forward of the k candidate tokens after x, y<t (a "tree"
forward, decoders/args_scorers.py) — is the same computation for every method, λ and seed whose
output still has the same prefix; only the heads differ. Here each (prompt, method head, user, λ) is
a ROW, and the candidate forward runs once per NODE: a distinct (prompt, generated prefix), in the
spirit of SGLang's radix cache. Every row reads its node's candidate states through its own head,
scores them with its own λ (Eq. 1: log π(v | x, y<t) + λ · r(x, y<t ∘ v)) and picks its token; rows
that pick the same token stay one node, rows that part get nodes of their own (the prefix cache is
copied once, at the split).

A row's tokens equal those of `args_decode` on that row alone up to float noise: a forward's sums
depend on the batch's other rows, so a choice between two candidates whose scores are within the
tie tolerance of the ranking metric (metrics/ranking.TIE_TOLERANCE) may go either way. Such steps
are counted per row (`near_ties`), never hidden.

    pytest tests/test_args_shared.py
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from persalign.decoders.args_scorers import policy_prefill, tree_forward
from persalign.engine.decoding import RowTracker, extend_mask, left_pad
from persalign.metrics.ranking import TIE_TOLERANCE
from persalign.models.loading import decoder_stack
from persalign.rewards.base import PoolingState


@dataclass(frozen=True)
class HeadRow:
    """One output to decode: a prompt, the reward head that guides it, the head's user and λ."""

    prompt: tuple[int, ...]
    method: object  # a sequence-level RewardMethod whose backbone is the policy itself
    user: str
    lam: float


@dataclass
class SharedDecode:
    """Each row's new token ids; per row the candidate forwards it needs alone (one per step), its share of
    those done (a node's forward split evenly among the rows reading it) and its near-tie steps."""

    ids: list[list[int]]
    needed: list[int] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    near_ties: list[int] = field(default_factory=list)


def reads_the_states(method) -> bool:
    """Whether an RM (method class or instance) reads the backbone's states as a sequence-level head, the one
    kind the pass takes as a row (a token-level or text-level RM decodes alone)."""
    return not getattr(method, "token_level", False) and not getattr(method, "text_level", False)


def shares_the_policy(policy, trained) -> bool:
    """Can this trained RM be a row of the shared pass: a sequence-level head over the policy's own model."""
    return trained.backbone.lm.model is policy.model and reads_the_states(trained.method)


def branch_cache(cache, past: int, parents: torch.Tensor, choices: torch.Tensor) -> None:
    """Node j of the next step = node parents[j]'s prefix + its candidate choices[j] (the k candidates'
    entries sit after `past`). The prefix is copied only where a node splits or is dropped; otherwise
    each node keeps its own entries in place, as `args_scorers.keep_chosen` does."""
    same = len(parents) == cache.layers[0].keys.shape[0] and bool(
        (parents == torch.arange(len(parents), device=parents.device)).all())
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name)
            chosen = tensor[parents, :, past + choices]  # (nodes, heads, dim)
            if same:
                tensor[:, :, past] = chosen
                setattr(layer, name, tensor[:, :, : past + 1])
            else:
                setattr(layer, name, torch.cat([tensor[parents, :, :past], chosen[:, :, None]], dim=2))


def head_groups(rows: list[HeadRow]) -> list[tuple[object, torch.Tensor]]:
    """(method, its rows' indices) for each distinct head, in first-seen order."""
    order: dict[int, tuple[object, list[int]]] = {}
    for i, row in enumerate(rows):
        order.setdefault(id(row.method), (row.method, []))[1].append(i)
    return [(method, torch.tensor(index)) for method, index in order.values()]  # moved to the device by RowState


class RowState:
    """The rows' side of the pass: users, λ, pooled rewards, near ties, and the node each live row reads."""

    def __init__(self, rows: list[HeadRow], node_of_row: list[int], device):
        self.groups = [(method, index.to(device)) for method, index in head_groups(rows)]
        self.users = torch.zeros(len(rows), dtype=torch.long, device=device)
        for method, index in self.groups:
            self.users[index] = method.user_ids([rows[i].user for i in index.tolist()]).to(device)
        self.lams = torch.tensor([float(r.lam) for r in rows], dtype=torch.float32, device=device)
        self.pool = PoolingState.empty(len(rows), device)
        self.node = torch.tensor(node_of_row, device=device)  # per row: its node (rows that finished: -1)
        self.near_ties = torch.zeros(len(rows), dtype=torch.long)
        self.needed = torch.zeros(len(rows), dtype=torch.long)
        self.done = torch.zeros(len(rows), dtype=torch.float64)

    def choose(self, top_logprobs, states) -> tuple[torch.Tensor, torch.Tensor]:
        """(live rows, each one's choice among its node's k candidates): Eq. 1 with the row's head and λ."""
        live = torch.nonzero(self.node >= 0).flatten()
        node = self.node[live]
        rewards = torch.zeros(len(self.node), top_logprobs.shape[1], device=top_logprobs.device)
        prefix = torch.zeros_like(rewards)
        for method, index in self.groups:
            index = index[self.node[index] >= 0]
            if len(index):
                rewards[index] = method.token_rewards(states[self.node[index]].float(), self.users[index])
                prefix[index] = PoolingState(self.pool.total[index], self.pool.count[index]).extend(
                    rewards[index], method.pooling)
        scores = top_logprobs[node] + self.lams[live, None] * prefix[live]
        choice = scores.argmax(dim=-1)
        self._count(live, node, scores)
        chosen = rewards[live].gather(1, choice[:, None]).squeeze(1)
        self.pool.total[live] += chosen
        self.pool.count[live] += 1
        return live, choice

    def _count(self, live, node, scores) -> None:
        best, second = scores.topk(2, dim=-1).values.unbind(-1) if scores.shape[1] > 1 else (scores[:, 0],) * 2
        scale = torch.clamp(best.abs(), min=1.0)
        close = (best - second <= TIE_TOLERANCE * scale) & (scores.shape[1] > 1)
        self.near_ties[live.cpu()] += close.long().cpu()
        readers = torch.bincount(node, minlength=int(node.max()) + 1).double()
        self.needed[live.cpu()] += 1
        self.done[live.cpu()] += (1.0 / readers[node]).cpu()


@torch.no_grad()
def shared_args_decode(policy, rows: list[HeadRow], max_new_tokens: int, top_k: int,
                       prefills: dict | None = None) -> SharedDecode:
    """ARGS-decode every row (Eq. 1) with one candidate forward per distinct (prompt, prefix) per step."""
    for method in {id(r.method): r.method for r in rows}.values():
        method.bind(policy)
    prompts = list(dict.fromkeys(r.prompt for r in rows))
    ids, mask, positions = left_pad([list(p) for p in prompts], policy.tokenizer.pad_token_id, policy.device)
    cache, logprobs = policy_prefill(policy, ids, mask, positions, prefills)
    state = RowState(rows, [prompts.index(r.prompt) for r in rows], policy.device)
    tracker = RowTracker(policy.tokenizer, logprobs.shape[-1], len(rows), policy.device)
    backbone, head = decoder_stack(policy.model), policy.model.get_output_embeddings()
    next_pos = positions[:, -1] + 1
    for step in range(max_new_tokens):
        top_logprobs, candidates = logprobs[:, : len(policy.tokenizer)].topk(top_k, dim=-1)
        past = mask.shape[1]
        states = tree_forward(backbone, cache, mask, next_pos, candidates)
        live, choice = state.choose(top_logprobs, states)
        tracker.push(candidates[state.node[live], choice], live)
        if tracker.done or step == max_new_tokens - 1:
            break
        going = ~tracker.finished[live]
        live, choice = live[going], choice[going]
        pairs = state.node[live] * top_k + choice  # (parent node, candidate) of each row still writing
        unique, inverse = torch.unique(pairs, return_inverse=True)
        parents, picks = unique // top_k, unique % top_k
        branch_cache(cache, past, parents, picks)
        state.node[:] = -1
        state.node[live] = inverse
        mask, next_pos = extend_mask(mask)[parents], next_pos[parents] + 1
        logprobs = torch.log_softmax(head(states[parents, picks]).float(), dim=-1)
    return SharedDecode(tracker.generated, state.needed.tolist(), state.done.tolist(), state.near_ties.tolist())

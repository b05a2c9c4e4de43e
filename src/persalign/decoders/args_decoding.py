"""ARGS: reward-guided decoding (Khanov et al. 2024; paper Eq. 1).

At each step t the policy's top-k tokens by log-probability (log-softmax, not
raw logits) are scored with

    score(v) = log π(v | x, y<t) + λ · r(x, y<t ∘ v)

and the argmax is taken. r is the RM's prefix reward (see rewards/base.py),
so ARGS's candidate reward equals the teacher-forced prefix reward of the
same tokens (a test checks this).

How it is made fast:
- batched over prompts; each row stops at its own EOS / end of line, and
  finished rows leave the batch (their caches are dropped);
- the RM keeps a KV cache of x, y<t; the k candidates are scored in ONE
  forward of k tokens on that cache with a "tree" attention mask (each
  candidate sees the prefix and itself), so the prefix is never copied k
  times; afterwards only the chosen candidate's KV entry is kept;
- shared-backbone fast path: when the RM is the frozen policy itself, that
  same k-candidate forward also yields the policy's next-step logits (read at
  the chosen candidate only), so a step costs one forward instead of two.
- a batch decoded several times (the λ choice: every method, seed and λ on
  the same validation batches) can share one prompt prefill (`prefills`);
- token-level RMs (GenARM) need no candidate forward at all: the RM's state
  after y<t scores every candidate token at once (one ARM step), and the
  prefix reward is the running sum. This is a capability the method declares
  (`token_level`), not a second loop: one loop, two candidate scorers
  (`TreeScorer`, `TokenScorer`).

    persalign run configs/news_category.yaml methods='[{name: global_rm}]'
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from persalign.decoding import RowTracker, extend_mask, left_pad
from persalign.errors import ConfigError
from persalign.models.loading import decoder_stack
from persalign.rewards.base import PoolingState


@dataclass
class RewardGuide:
    """A reward model ready to guide decoding: its backbone LM, its method, each row's user."""

    lm: object  # LoadedLM of the RM backbone (may be the policy itself)
    method: object  # RewardMethod
    users: list[str]
    lam: float = 1.0  # λ of Eq. 1: the reward's weight against log π
    top_k: int = 10  # candidates scored per step (the policy's top k)
    # Prompt prefills of the policy shared by several decodes of the same batch (the λ choice: every
    # method × seed × λ decodes the same validation batches); None: prefill every time.
    prefills: dict | None = None


def check_same_tokenizer(policy_tokenizer, rm_tokenizer) -> None:
    if policy_tokenizer is rm_tokenizer:
        return
    if policy_tokenizer.get_vocab() != rm_tokenizer.get_vocab():
        raise ConfigError(
            "ARGS needs the policy and the reward model to share a tokenizer (candidates are token ids); "
            f"{getattr(policy_tokenizer, 'name_or_path', '?')} and {getattr(rm_tokenizer, 'name_or_path', '?')} differ"
        )


TREE_MASK_IMPLEMENTATIONS = ("eager", "sdpa")  # both take an additive float 4D mask as given


def tree_mask(mask: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """(rows, 1, k, past + k) additive mask: each candidate sees the prefix and itself, never another candidate.

    Additive floats (0 or the dtype's minimum), not booleans: eager attention
    adds a 4D mask to the scores, so a boolean mask would add 0/1 and let every
    candidate see every other one.
    """
    rows, past = mask.shape
    sees_prefix = mask.bool()[:, None, None, :].expand(rows, 1, k, past)
    sees_itself = torch.eye(k, dtype=torch.bool, device=mask.device)[None, None].expand(rows, 1, k, k)
    allowed = torch.cat([sees_prefix, sees_itself], dim=-1)
    return torch.zeros(allowed.shape, dtype=dtype, device=mask.device).masked_fill(~allowed, torch.finfo(dtype).min)


def check_tree_attention(backbone) -> None:
    implementation = getattr(backbone.config, "_attn_implementation", None) or "eager"
    if implementation not in TREE_MASK_IMPLEMENTATIONS:
        raise ConfigError(f"ARGS scores its k candidates with a custom 4D attention mask, which attention "
                          f"implementation {implementation!r} does not take; load the reward backbone with "
                          f"attn_implementation='sdpa' or 'eager'")


def tree_forward(backbone, cache, mask: torch.Tensor, next_pos: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """States of k candidate tokens appended to each row's cached prefix, in one forward.

    Appends k entries to `cache`; call `keep_chosen` afterwards.
    """
    rows, k = candidates.shape
    check_tree_attention(backbone)
    attention = tree_mask(mask, k, backbone.get_input_embeddings().weight.dtype)
    out = backbone(input_ids=candidates, attention_mask=attention,
                   position_ids=next_pos[:, None].expand(rows, k), past_key_values=cache, use_cache=True)
    return out.last_hidden_state


def keep_chosen(cache, past: int, choice: torch.Tensor) -> None:
    """Drop the k candidate entries from the cache except each row's chosen one."""
    rows = torch.arange(choice.shape[0], device=choice.device)
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name)
            tensor[:, :, past] = tensor[rows, :, past + choice]  # (rows, heads, dim); no copy of the prefix
            setattr(layer, name, tensor[:, :, : past + 1])


def record_step(trace: list, rows: int, live: torch.Tensor, candidates: torch.Tensor, rewards: torch.Tensor) -> None:
    """Candidates and their prefix rewards of one step, at each row's ORIGINAL index (finished rows: 0)."""
    full = torch.zeros((rows, candidates.shape[1]), dtype=candidates.dtype, device=candidates.device)
    full_rewards = torch.zeros((rows, candidates.shape[1]), device=candidates.device)
    full[live], full_rewards[live] = candidates, rewards
    trace.append((full, full_rewards))


def select_rows(cache, index: torch.Tensor) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def reuse_prefill(memo: dict | None, key: tuple, compute):
    """`compute()` once per key; each caller gets its own copy, since decoding grows and trims caches.

    The key is the whole padded batch, so a reused prefill is exactly the forward this call would run
    (a forward's float sums depend on the batch's other rows and on padding).
    """
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return copy.deepcopy(memo[key])


def batch_key(kind: str, ids: torch.Tensor, mask: torch.Tensor) -> tuple:
    return kind, tuple(ids.shape), tuple(ids.flatten().tolist()), tuple(mask.flatten().tolist())


def policy_prefill(policy, ids, mask, positions, memo: dict | None):
    """(cache, log π(· | prompt)) of the policy's prefill, reused from `memo` when the batch was seen."""
    def compute():
        out = policy.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           logits_to_keep=1)
        return out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), dim=-1)

    return reuse_prefill(memo, batch_key("policy", ids, mask), compute)


class TreeScorer:
    """Sequence-level RM: the k candidates go through one tree forward on the RM's prefix cache."""

    def __init__(self, guide: RewardGuide, policy, shared: bool):
        self.guide, self.policy, self.shared = guide, policy, shared
        self.backbone = decoder_stack(guide.lm.model)

    def prefill(self, ids, mask, positions):
        """(policy cache, first log-probs): the policy's prefill, and the RM's own unless it is the policy."""
        policy_cache, logprobs = policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)
        if self.shared:
            self.cache = policy_cache
        else:
            lm_device = self.guide.lm.device
            self.cache = self.backbone(input_ids=ids.to(lm_device), attention_mask=mask.to(lm_device),
                                       position_ids=positions.to(lm_device), use_cache=True).past_key_values
        return policy_cache, logprobs

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        self.past = mask.shape[1]
        self.states = tree_forward(self.backbone, self.cache, mask, next_pos, candidates)
        return self.guide.method.token_rewards(self.states.float(), users)

    def advance(self, choice, tokens, mask, next_pos) -> torch.Tensor | None:
        """Keep the chosen candidate's cache entry; with the shared backbone, its state gives the next logits."""
        keep_chosen(self.cache, self.past, choice)
        if not self.shared:
            return None
        chosen_states = self.states[torch.arange(len(choice), device=self.states.device), choice]
        return torch.log_softmax(self.policy.model.get_output_embeddings()(chosen_states).float(), dim=-1)

    def select(self, index) -> None:
        """Finished rows leave (the shared cache is the policy's: selected once, by the loop)."""
        if not self.shared:
            select_rows(self.cache, index)


class TokenScorer:
    """Token-level RM (GenARM): the RM state after y<t scores every candidate token at once (one ARM step)."""

    def __init__(self, guide: RewardGuide, policy, shared: bool):
        self.guide, self.policy, self.shared = guide, policy, shared
        self.backbone = decoder_stack(guide.lm.model)

    def prefill(self, ids, mask, positions):
        """(policy cache, first log-probs); with the shared backbone the RM's prefill is the policy's."""
        lm_device = self.guide.lm.device

        def compute():
            out = self.backbone(input_ids=ids.to(lm_device), attention_mask=mask.to(lm_device),
                                position_ids=positions.to(lm_device), use_cache=True)
            return out.past_key_values, out.last_hidden_state[:, -1]

        memo = self.guide.prefills if self.shared else None  # another RM's prefill is its own
        self.cache, self.state = reuse_prefill(memo, batch_key("stack", ids, mask), compute)
        if self.shared:
            return self.cache, torch.log_softmax(self.policy.model.get_output_embeddings()(self.state).float(), dim=-1)
        return policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        return self.guide.method.next_token_rewards(self.state, candidates, users)

    def advance(self, choice, tokens, mask, next_pos) -> torch.Tensor | None:
        out = self.backbone(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                            past_key_values=self.cache, use_cache=True)
        self.state = out.last_hidden_state[:, -1]
        if not self.shared:
            return None
        return torch.log_softmax(self.policy.model.get_output_embeddings()(self.state).float(), dim=-1)

    def select(self, index) -> None:
        if not self.shared:  # the shared cache is the policy's: selected once, by the loop
            select_rows(self.cache, index)
        self.state = self.state[index]


class TextScorer:
    """A text-level RM with its own tokenizer (hf_rm): each candidate becomes the text prompt + prefix +
    candidate, read whole by the RM (no cache between steps); the policy decodes as in greedy."""

    def __init__(self, guide: RewardGuide, policy, prompts: list[list[int]]):
        self.guide, self.policy = guide, policy
        self.prompts, self.prefixes = list(prompts), [[] for _ in prompts]
        self.live = list(range(len(prompts)))
        self.read: list[list[int]] = [[] for _ in prompts]  # RM tokens of every text each row's steps read

    def prefill(self, ids, mask, positions):
        return policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        rewards, lengths = self.guide.method.candidate_rewards([self.prompts[r] for r in self.live],
                                                               [self.prefixes[r] for r in self.live], candidates)
        for row, read in zip(self.live, lengths):
            self.read[row] += read
        return rewards

    def advance(self, choice, tokens, mask, next_pos) -> None:
        for row, token in zip(self.live, tokens.tolist()):
            self.prefixes[row].append(token)
        return None

    def select(self, index) -> None:
        self.live = [self.live[i] for i in index.tolist()]


def make_scorer(policy, guide: RewardGuide, prompts: list[list[int]]):
    """The method declares how its candidates are scored (`token_level`, `text_level`); the loop is the same."""
    if getattr(guide.method, "text_level", False):
        return TextScorer(guide, policy, prompts)
    shared = guide.lm.model is policy.model
    return (TokenScorer if guide.method.token_level else TreeScorer)(guide, policy, shared)


@torch.no_grad()
def args_decode(policy, guide: RewardGuide, prompts: list[list[int]], max_new_tokens: int,
                trace: list | None = None, stats: dict | None = None) -> list[list[int]]:
    """ARGS-decode every prompt (Eq. 1); returns new token ids per row.

    `trace` collects (candidates, candidate prefix rewards) per step; `stats`
    receives prefill seconds, decode seconds and the number of steps.
    """
    if not getattr(guide.method, "text_level", False):  # a text-level RM reads text: any tokenizer will do
        check_same_tokenizer(policy.tokenizer, guide.lm.tokenizer)
    guide.method.bind(guide.lm)
    started = time.perf_counter()
    scorer = make_scorer(policy, guide, prompts)
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    policy_cache, logprobs = scorer.prefill(ids, mask, positions)
    users = guide.method.user_ids(guide.users).to(policy.device)
    pool = PoolingState.empty(len(prompts), policy.device)
    rows = RowTracker(policy.tokenizer, logprobs.shape[-1], len(prompts), policy.device)
    live = torch.arange(len(prompts), device=policy.device)  # original row of each batch row
    next_pos, prefilled, step = positions[:, -1] + 1, time.perf_counter(), 0
    for step in range(max_new_tokens):
        top_logprobs, candidates = logprobs.topk(guide.top_k, dim=-1)
        rewards = scorer.token_rewards(candidates, mask, next_pos, users)  # (rows, k) token rewards
        candidate_prefix = pool.extend(rewards, guide.method.pooling)
        choice = (top_logprobs + guide.lam * candidate_prefix).argmax(dim=-1)
        if trace is not None:
            record_step(trace, len(prompts), live, candidates, candidate_prefix)
        pool.commit(rewards.gather(1, choice[:, None]).squeeze(1))
        tokens = rows.push(candidates.gather(1, choice[:, None]).squeeze(1), live)
        if rows.done or step == max_new_tokens - 1:
            break
        mask = extend_mask(mask)
        logprobs = scorer.advance(choice, tokens, mask, next_pos)
        if logprobs is None:
            out = policy.model(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                               past_key_values=policy_cache, use_cache=True)
            logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        next_pos = next_pos + 1
        keep = ~rows.finished[live]
        if not bool(keep.all()):  # drop finished rows: later steps cost only what is still being written
            index = torch.nonzero(keep).flatten()
            select_rows(policy_cache, index)
            scorer.select(index)
            live, mask, next_pos, logprobs, users = live[index], mask[index], next_pos[index], logprobs[index], users[index]
            pool = PoolingState(pool.total[index], pool.count[index])
    if stats is not None:
        stats.update(prefill_s=prefilled - started, decode_s=time.perf_counter() - prefilled, steps=step + 1,
                     reward_texts=getattr(scorer, "read", None))
    return rows.generated


def args_decode_reusing_greedy(memo: dict, policy, guide: RewardGuide, prompts: list[list[int]],
                               max_new_tokens: int) -> list[list[int]]:
    """`args_decode`, except that at λ = 0 (greedy: the reward cannot change a choice) a batch of prompts
    decoded before by the same kind of scorer is reused from `memo` (one per policy): the λ choice's
    validation batches at λ = 0 are decoded once per policy, not once per method × seed. The key is the
    whole batch and the scorer kind, so a reused batch is exactly what this call would have computed (a
    forward's float sums depend on the batch's other rows). Deployments do not reuse: their generation
    seconds are their cost."""
    if guide.lam != 0:
        return args_decode(policy, guide, prompts, max_new_tokens)
    key = (guide.method.token_level, getattr(guide.method, "text_level", False), guide.lm.model is policy.model,
           guide.top_k, max_new_tokens,
           tuple(map(tuple, prompts)))
    if key not in memo:
        memo[key] = args_decode(policy, guide, prompts, max_new_tokens)
    return [list(row) for row in memo[key]]

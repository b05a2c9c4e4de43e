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
- token-level RMs (GenARM) need no candidate forward at all: the RM's state
  after y<t scores every candidate token at once (one ARM step), and the
  prefix reward is the running sum (`token_level_decode`).

    persalign run configs/news_category.yaml methods='[{name: global_rm}]'
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from persalign.decoding import RowTracker, clean_generation, extend_mask, left_pad
from persalign.errors import ConfigError
from persalign.models.loading import decoder_stack
from persalign.rewards.base import PoolingState


@dataclass
class RewardGuide:
    """A reward model ready to guide decoding: its backbone LM, its method, each row's user."""

    lm: object  # LoadedLM of the RM backbone (may be the policy itself)
    method: object  # RewardMethod
    users: list[str]


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


@torch.no_grad()
def args_decode(policy, guide: RewardGuide, prompts: list[list[int]], lam: float, top_k: int,
                max_new_tokens: int, trace: list | None = None, stats: dict | None = None) -> list[list[int]]:
    """ARGS-decode every prompt; returns new token ids per row.

    `trace` collects (candidates, candidate prefix rewards) per step; `stats`
    receives prefill seconds, decode seconds and the number of steps.
    """
    check_same_tokenizer(policy.tokenizer, guide.lm.tokenizer)
    guide.method.bind(guide.lm)
    if guide.method.token_level:
        return token_level_decode(policy, guide, prompts, lam, top_k, max_new_tokens, trace, stats)
    started = time.perf_counter()
    shared = guide.lm.model is policy.model
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    out = policy.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    policy_cache = out.past_key_values
    logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
    rm_backbone = decoder_stack(guide.lm.model)
    if shared:
        rm_cache = policy_cache
    else:
        rm_cache = rm_backbone(input_ids=ids.to(guide.lm.device), attention_mask=mask.to(guide.lm.device),
                               position_ids=positions.to(guide.lm.device), use_cache=True).past_key_values
    users = guide.method.user_ids(guide.users).to(policy.device)
    pool = PoolingState.empty(len(prompts), policy.device)
    rows = RowTracker(policy.tokenizer, logprobs.shape[-1], len(prompts), policy.device)
    live = torch.arange(len(prompts), device=policy.device)  # original row of each batch row
    next_pos = positions[:, -1] + 1
    head = policy.model.get_output_embeddings()
    prefilled = time.perf_counter()
    step = 0
    for step in range(max_new_tokens):
        top_logprobs, candidates = logprobs.topk(top_k, dim=-1)
        past = mask.shape[1]
        states = tree_forward(rm_backbone, rm_cache, mask, next_pos, candidates)
        candidate_prefix, rewards = guide.method.candidate_rewards(states.float(), users, pool)  # (rows, k) each
        choice = (top_logprobs + lam * candidate_prefix).argmax(dim=-1)
        if trace is not None:
            record_step(trace, len(prompts), live, candidates, candidate_prefix)
        pool.commit(rewards.gather(1, choice[:, None]).squeeze(1))
        keep_chosen(rm_cache, past, choice)
        tokens = rows.push(candidates.gather(1, choice[:, None]).squeeze(1), live)
        if rows.done or step == max_new_tokens - 1:
            break
        mask = extend_mask(mask)
        if shared:
            # The chosen candidate's state is the policy's state after that token: next logits for free.
            chosen_states = states[torch.arange(len(live), device=states.device), choice]
            logprobs = torch.log_softmax(head(chosen_states).float(), dim=-1)
        else:
            out = policy.model(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                               past_key_values=policy_cache, use_cache=True)
            logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        next_pos = next_pos + 1
        keep = ~rows.finished[live]
        if not bool(keep.all()):  # drop finished rows: later steps cost only what is still being written
            index = torch.nonzero(keep).flatten()
            for cache in {id(policy_cache): policy_cache, id(rm_cache): rm_cache}.values():
                select_rows(cache, index)
            live, mask, next_pos, logprobs, users = live[index], mask[index], next_pos[index], logprobs[index], users[index]
            pool = PoolingState(pool.total[index], pool.count[index])
    if stats is not None:
        stats.update(prefill_s=prefilled - started, decode_s=time.perf_counter() - prefilled, steps=step + 1)
    return rows.generated


@torch.no_grad()
def token_level_decode(policy, guide: RewardGuide, prompts: list[list[int]], lam: float, top_k: int,
                       max_new_tokens: int, trace: list | None = None, stats: dict | None = None) -> list[list[int]]:
    """ARGS with a token-level RM: candidate rewards from the RM state after y<t, one forward per model and step.

    When the RM backbone is the frozen policy, the RM forward of the chosen
    token also gives the policy's next logits (one forward per step).
    """
    started = time.perf_counter()
    shared = guide.lm.model is policy.model
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    rm_backbone = decoder_stack(guide.lm.model)
    head = policy.model.get_output_embeddings()
    out = rm_backbone(input_ids=ids.to(guide.lm.device), attention_mask=mask.to(guide.lm.device),
                      position_ids=positions.to(guide.lm.device), use_cache=True)
    rm_cache, rm_state = out.past_key_values, out.last_hidden_state[:, -1]
    if shared:
        policy_cache, logprobs = rm_cache, torch.log_softmax(head(rm_state).float(), dim=-1)
    else:
        out = policy.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        policy_cache, logprobs = out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), dim=-1)
    users = guide.method.user_ids(guide.users).to(policy.device)
    pool = PoolingState.empty(len(prompts), policy.device)
    rows = RowTracker(policy.tokenizer, logprobs.shape[-1], len(prompts), policy.device)
    live = torch.arange(len(prompts), device=policy.device)
    next_pos = positions[:, -1] + 1
    prefilled = time.perf_counter()
    step = 0
    for step in range(max_new_tokens):
        top_logprobs, candidates = logprobs.topk(top_k, dim=-1)
        rewards = guide.method.next_token_rewards(rm_state, candidates, users)
        candidate_prefix = pool.extend(rewards, guide.method.pooling)
        choice = (top_logprobs + lam * candidate_prefix).argmax(dim=-1)
        if trace is not None:
            record_step(trace, len(prompts), live, candidates, candidate_prefix)
        pool.commit(rewards.gather(1, choice[:, None]).squeeze(1))
        tokens = rows.push(candidates.gather(1, choice[:, None]).squeeze(1), live)
        if rows.done or step == max_new_tokens - 1:
            break
        mask = extend_mask(mask)
        out = rm_backbone(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                          past_key_values=rm_cache, use_cache=True)
        rm_state = out.last_hidden_state[:, -1]
        if shared:
            logprobs = torch.log_softmax(head(rm_state).float(), dim=-1)
        else:
            out = policy.model(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                               past_key_values=policy_cache, use_cache=True)
            logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        next_pos = next_pos + 1
        keep = ~rows.finished[live]
        if not bool(keep.all()):
            index = torch.nonzero(keep).flatten()
            for cache in {id(policy_cache): policy_cache, id(rm_cache): rm_cache}.values():
                select_rows(cache, index)
            live, mask, next_pos, logprobs, users = live[index], mask[index], next_pos[index], logprobs[index], users[index]
            rm_state = rm_state[index]
            pool = PoolingState(pool.total[index], pool.count[index])
    if stats is not None:
        stats.update(prefill_s=prefilled - started, decode_s=time.perf_counter() - prefilled, steps=step + 1)
    return rows.generated


def args_generate(policy, guide: RewardGuide, prompts, lam: float, top_k: int, max_new_tokens: int) -> list[str]:
    return [clean_generation(policy.tokenizer, ids) for ids in args_decode(policy, guide, prompts, lam, top_k, max_new_tokens)]

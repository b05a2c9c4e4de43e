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
  (`TreeScorer`, `TokenScorer`, and `TextScorer` for a text-level RM: decoders/args_scorers.py).

    persalign run configs/news_category.yaml methods='[{name: global_rm}]'
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from persalign.core.errors import ConfigError
from persalign.decoders.args_scorers import RewardGuide, make_scorer, select_rows, tree_forward  # noqa: F401  (RewardGuide, tree_forward: the public names)
from persalign.engine.decoding import RowTracker, extend_mask, left_pad
from persalign.engine.work_meter import shared_work
from persalign.rewards.base import PoolingState


def check_same_tokenizer(policy_tokenizer, rm_tokenizer) -> None:
    if policy_tokenizer is rm_tokenizer:
        return
    if policy_tokenizer.get_vocab() != rm_tokenizer.get_vocab():
        raise ConfigError(
            "ARGS needs the policy and the reward model to share a tokenizer (candidates are token ids); "
            f"{getattr(policy_tokenizer, 'name_or_path', '?')} and {getattr(rm_tokenizer, 'name_or_path', '?')} differ"
        )


def record_step(trace: list, rows: int, live: torch.Tensor, candidates: torch.Tensor, rewards: torch.Tensor) -> None:
    """Candidates and their prefix rewards of one step, at each row's ORIGINAL index (finished rows: 0)."""
    full = torch.zeros((rows, candidates.shape[1]), dtype=candidates.dtype, device=candidates.device)
    full_rewards = torch.zeros((rows, candidates.shape[1]), device=candidates.device)
    full[live], full_rewards[live] = candidates, rewards
    trace.append((full, full_rewards))


@dataclass
class DecodeRecord:
    """What `args_decode` reports beside the tokens: prefill and decode seconds, steps and the texts a
    text-level RM read (`stats`); per step the candidates and their prefix rewards when `trace` is a list."""

    stats: dict = field(default_factory=dict)
    trace: list | None = None


@torch.no_grad()
def args_decode(policy, guide: RewardGuide, prompts: list[list[int]], max_new_tokens: int,
                record: DecodeRecord | None = None) -> list[list[int]]:
    """ARGS-decode every prompt (Eq. 1); returns new token ids per row."""
    if not getattr(guide.method, "text_level", False):  # a text-level RM reads text: any tokenizer will do
        check_same_tokenizer(policy.tokenizer, guide.lm.tokenizer)
    guide.method.bind(guide.lm)
    started = time.perf_counter()
    scorer = make_scorer(policy, guide, prompts)
    ids, mask, positions = left_pad(prompts, policy.tokenizer.pad_token_id, policy.device)
    policy_cache, logprobs = scorer.prefill(ids, mask, positions)
    users = guide.method.user_ids(guide.users).to(policy.device)
    lams = torch.as_tensor(guide.lam, dtype=torch.float32, device=policy.device).expand(len(prompts))
    pool = PoolingState.empty(len(prompts), policy.device)
    rows = RowTracker(policy.tokenizer, logprobs.shape[-1], len(prompts), policy.device)
    live = torch.arange(len(prompts), device=policy.device)  # original row of each batch row
    next_pos, prefilled, step = positions[:, -1] + 1, time.perf_counter(), 0
    for step in range(max_new_tokens):
        # only the tokenizer's ids are candidates: rows past it (a padded head: Qwen2.5-7B has 152,064 for
        # 151,665 tokens) are no text, and a reward backbone of another scale has no embedding for them
        top_logprobs, candidates = logprobs[:, : len(policy.tokenizer)].topk(guide.top_k, dim=-1)
        rewards = scorer.token_rewards(candidates, mask, next_pos, users)  # (rows, k) token rewards
        candidate_prefix = pool.extend(rewards, guide.method.pooling)
        choice = (top_logprobs + lams[:, None] * candidate_prefix).argmax(dim=-1)
        if record is not None and record.trace is not None:
            record_step(record.trace, len(prompts), live, candidates, candidate_prefix)
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
            live, mask, next_pos, logprobs, users, lams = (t[index] for t in (live, mask, next_pos, logprobs, users,
                                                                               lams))
            pool = PoolingState(pool.total[index], pool.count[index])
    if record is not None:
        record.stats.update(prefill_s=prefilled - started, decode_s=time.perf_counter() - prefilled, steps=step + 1,
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
    if not isinstance(guide.lam, (int, float)) or guide.lam != 0:
        return args_decode(policy, guide, prompts, max_new_tokens)
    key = (guide.method.token_level, getattr(guide.method, "text_level", False), guide.lm.model is policy.model,
           guide.top_k, max_new_tokens,
           tuple(map(tuple, prompts)))
    if key not in memo:
        with shared_work(getattr(memo, "meter", None)):  # every later method and seed reuses it
            memo[key] = args_decode(policy, guide, prompts, max_new_tokens)
    return [list(row) for row in memo[key]]

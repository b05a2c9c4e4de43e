"""s_RGD, the reward-guided policy scoring function (paper Eq. 5-6), in one place.

    s_RGD(y|x) = Σ_t [ log π(y_t | x, y<t) + λ · r(y_t | x, y<t) ]

r(y_t | x, y<t) is the RM's per-step reward (`RewardMethod.step_rewards`):
the head on the prefix y<=t for sequence-level heads, the token reward for a
token-level RM (GenARM). Σ_t log π comes from one teacher-forced forward of
the policy per (prompt, response), memoised across cells; every step reward
of a response comes from one teacher-forced pass of the RM backbone (cached
in frozen mode): a causal LM's state at t depends only on tokens <= t. The
runner's policy accuracy, the λ choice and `benchmarks/bench_policy_scoring.py`
all score through these functions. (s_base and s_ICL, Eq. 4 and 7, are
`persalign.engine.scoring.mean_logprob` on the decoder's prompt.)

    python benchmarks/bench_policy_scoring.py --quick
"""

from __future__ import annotations

import numpy as np
import torch

from persalign.engine.scoring import response_logprobs
from persalign.engine.work_meter import shared_work
from persalign.rewards.backbone import pad_states


def s_rgd(logprob_sums, step_reward_sums, lam):
    """Eq. 5-6 from its two sums; `lam` may be a scalar or a column of a λ grid (broadcasts)."""
    return np.asarray(logprob_sums) + lam * np.asarray(step_reward_sums)


@torch.no_grad()
def reward_sums(method, backbone, users, prompts, responses) -> tuple[np.ndarray, np.ndarray]:
    """(sequence reward R(x, y), Σ_t r(y_t | x, y<t)) of each response under a trained RM."""
    if hasattr(method, "reward_sums"):  # a text-level RM (hf_rm) reads text, not the backbone's states
        sequence, steps = method.reward_sums(backbone, users, prompts, responses)
        return np.asarray(sequence, dtype=np.float32), np.asarray(steps, dtype=np.float32)
    states = method.features(backbone, prompts, responses)
    padded, mask = pad_states(states)
    ids = method.user_ids(users)
    sequence = method.sequence_rewards(padded, mask, ids) * mask.any(-1)
    steps = method.step_rewards(padded, mask, ids)
    return sequence.numpy(), steps.sum(-1).numpy()


def whole_response_rewards(method, backbone, users, prompts, responses) -> np.ndarray:
    """R(x, y) of whole responses only (Best-of-N, the win rate): a text-level RM then reads each response
    once instead of once per prefix."""
    if hasattr(method, "sequence_scores"):
        return np.asarray(method.sequence_scores(backbone, prompts, responses), dtype=np.float32)
    return reward_sums(method, backbone, users, prompts, responses)[0]


def logprob_sums(policy, prompts, responses, batch_size: int, memo: dict | None = None,
                 token_budget: int | None = None) -> np.ndarray:
    """Σ_t log π(y_t | x, y<t); `memo` keeps them across cells (the same for every method and seed)."""
    memo = {} if memo is None else memo
    keys = [(policy.name, tuple(p), tuple(r)) for p, r in zip(prompts, responses)]
    todo = list({k: i for i, k in enumerate(keys) if k not in memo}.values())  # one index per new key
    if todo:
        with shared_work(getattr(memo, "meter", None)):  # later cells read them from the memo
            computed = response_logprobs(policy, [prompts[i] for i in todo], [responses[i] for i in todo], batch_size,
                                         token_budget)
        memo.update({keys[i]: float(lp.sum()) for i, lp in zip(todo, computed)})
    return np.array([memo[k] for k in keys])

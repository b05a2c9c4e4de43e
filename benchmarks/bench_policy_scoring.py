"""Policy accuracy with s_RGD (Eq. 5-6): one-pass prefix rewards vs per-prefix recomputation.

Eq. 5-6 need the reward of every prefix y<=t. Recomputing each prefix with
its own RM forward is what a direct reading of the equation does; persalign
reads all step rewards off one teacher-forced forward (the states of a
causal LM at t depend only on tokens <= t): the runner's own path, the
functions of `persalign.rewards.policy_scoring` (logprob_sums, reward_sums,
s_rgd) that policy accuracy and the λ choice use. Both are run on the same
news_category query pairs with SmolLM2-135M (policy and RM backbone) and a
Global RM head; the decisions s(chosen) > s(rejected) must be identical.

    python benchmarks/bench_policy_scoring.py            # 48 pairs
    python benchmarks/bench_policy_scoring.py --quick    # 8 pairs
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from common import count, emit, machine, news_query_pairs, non_negative, peak_memory_mib

from persalign.core.prompts import PromptFormatter
from persalign.core.registry import METHODS
from persalign.models.loading import decoder_stack, load_causal_lm
from persalign.rewards.backbone import RewardBackbone
from persalign.rewards.policy_scoring import logprob_sums, reward_sums, s_rgd


@torch.no_grad()
def per_prefix(policy, method, user, prompt, response):
    """Σ log π from one forward, then one RM forward for EVERY prefix y<=t (the naive reading)."""
    ids = torch.tensor([prompt + response])
    logits = policy.model(ids).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    lp = sum(float(logp[len(prompt) + t - 1, tok]) for t, tok in enumerate(response))
    rewards = 0.0
    stack = decoder_stack(policy.model)
    for t in range(1, len(response) + 1):
        hidden = stack(input_ids=torch.tensor([prompt + response[:t]])).last_hidden_state[:, -1:]
        rewards += float(method.token_rewards(hidden.float(), method.user_ids([user]))[0, -1])
    return lp, rewards


def runner_path(policy, method, backbone, rows: tuple[list, list, list], batch_size: int = 16):
    """(Σ log π, Σ step rewards) exactly as the runner computes them (no memo: every pair is new); `rows`:
    (users, prompts, responses)."""
    users, prompts, responses = rows
    lp = logprob_sums(policy, prompts, responses, batch_size)
    _, step_sums = reward_sums(method, backbone, users, prompts, responses)
    return lp, step_sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 pairs instead of 48")
    parser.add_argument("--pairs", type=count, default=None, help="number of query pairs")
    parser.add_argument("--lam", type=non_negative, default=1.0, help="the λ of Eq. 5-6")
    args = parser.parse_args()
    n = args.pairs or (8 if args.quick else 48)
    torch.manual_seed(0)
    _, _, pairs = news_query_pairs(n)
    policy = load_causal_lm("smollm2-135m-instruct")
    formatter = PromptFormatter(policy.tokenizer, "headline")
    method = METHODS.get("global_rm")(policy.model.config.hidden_size, METHODS.get("global_rm").Settings(seed=0)).eval()
    with torch.no_grad():
        method.head.linear.weight.normal_(0, 0.05)
    users = [p.user for p in pairs]
    prompts = [formatter.prompt_ids(p.prompt) for p in pairs]
    chosen = [formatter.response_ids(p.chosen) for p in pairs]
    rejected = [formatter.response_ids(p.rejected) for p in pairs]

    # Warm-up (first-call allocations) on one pair, outside both timings.
    runner_path(policy, method, RewardBackbone(policy, "warm"), (users[:1], prompts[:1], chosen[:1]))
    per_prefix(policy, method, users[0], prompts[0], chosen[0][:2])

    start = time.perf_counter()
    backbone = RewardBackbone(policy, "bench")  # shared frozen backbone, in-memory only
    lp, r_sum = runner_path(policy, method, backbone, (users * 2, prompts * 2, chosen + rejected))
    one_pass_s = time.perf_counter() - start
    s_fast = s_rgd(lp, r_sum, args.lam)

    start = time.perf_counter()
    slow = [per_prefix(policy, method, u, p, r) for u, p, r in zip(users * 2, prompts * 2, chosen + rejected)]
    per_prefix_s = time.perf_counter() - start
    s_slow = np.array([float(s_rgd(a, b, args.lam)) for a, b in slow])

    decide = lambda s: s[:n] > s[n:]  # noqa: E731
    result = {
        "benchmark": "policy_scoring", "pairs": n, "lambda": args.lam,
        "one_pass_pairs_per_s": n / one_pass_s, "per_prefix_pairs_per_s": n / per_prefix_s,
        "speedup": per_prefix_s / one_pass_s,
        "identical_decisions": bool(np.array_equal(decide(s_fast), decide(s_slow))),
        "max_abs_score_diff": float(np.max(np.abs(s_fast - s_slow))),
        "policy_accuracy": 100 * float(decide(s_fast).mean()),
        "peak_memory_mib": peak_memory_mib(), "machine": machine(),
    }
    print(f"one-pass: {result['one_pass_pairs_per_s']:.2f} pairs/s; per-prefix: {result['per_prefix_pairs_per_s']:.3f} "
          f"pairs/s; speedup {result['speedup']:.1f}x; identical decisions: {result['identical_decisions']}")
    emit(result)


if __name__ == "__main__":
    main()

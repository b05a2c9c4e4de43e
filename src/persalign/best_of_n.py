"""Best-of-N deployment (Personalized RewardBench's downstream test).

Sample N_max responses per prompt from the policy (temperature sampling,
seeded), score each with the user's reward model, and for every N in the
nested set {1, 2, 4, ..., N_max} keep the best of the FIRST N samples: all
N share one sample set, as the benchmark does, so quality-vs-N curves are
not confounded by resampling.

    python -c "from persalign.best_of_n import nested_best; print(nested_best([[0.1, 0.9, 0.3, 0.5]], [1, 2, 4]))"
"""

from __future__ import annotations

import hashlib

import torch

from persalign.decoding import clean_generation, decode


def sampler(seed: int, key: str, temperature: float = 1.0):
    """A chooser that samples from softmax(logprobs / T) with a generator fixed by (seed, key)."""
    digest = int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:12], 16)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + digest)

    def choose(logprobs: torch.Tensor, step: int) -> torch.Tensor:
        probs = torch.softmax(logprobs.float().cpu() / max(temperature, 1e-6), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(logprobs.device)

    return choose


def sample_responses(policy, prompts: list[list[int]], n: int, max_new_tokens: int, seed: int, key: str,
                     temperature: float = 1.0) -> list[list[str]]:
    """n samples per prompt (prompt-major), from one seeded batch."""
    repeated = [p for p in prompts for _ in range(n)]
    ids = decode(policy, repeated, sampler(seed, key, temperature), max_new_tokens)
    texts = [clean_generation(policy.tokenizer, row) for row in ids]
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def nested_best(scores: list[list[float]], ns: list[int]) -> dict[int, list[int]]:
    """For each N: the index of the highest-scoring sample among the first N (first index wins ties)."""
    out = {}
    for n in ns:
        out[n] = [int(torch.tensor(row[:n]).argmax()) for row in scores]
    return out

"""The reward interface every method shares, and the pooling of token rewards.

A reward model here is a head over backbone states: `token_rewards(states,
users)` gives r_t for each position t (the reward of the prefix y<=t seen
through the head), and the method's pooling turns them into prefix rewards:

- pooling "last" (Global RM, most personalized heads): R(y<=t) = r_t
- pooling "mean" (Global RM-v2): R(y<=t) = mean_{s<=t} r_s (running mean)
- pooling "sum" (GenARM): R(y<=t) = Σ_{s<=t} r_s (token-level rewards add up)

The sequence reward is the prefix reward at the last real token, found from
the mask (never from pad_token_id, which may equal EOS). ARGS (Eq. 1) needs
the prefix reward of y<t + candidate v: `extend_prefix` does it from the
running pooling state, so candidate rewards equal teacher-forced prefix rewards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


def reward_map(hidden_size: int, k: int, bias: bool = True) -> nn.Linear:
    """A linear map of the backbone state to K reward values, weights N(0, 1/hidden²) so the first rewards are
    near 0 (LoRE's bases, PReF's φ); its bias, if any, 0. Built as nn.Linear first: the seeded draws stay those
    the pinned numbers were stored with."""
    layer = nn.Linear(hidden_size, k, bias=bias)
    nn.init.normal_(layer.weight, std=1.0 / hidden_size)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def prefix_rewards(token_rewards: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(batch, T) prefix rewards from (batch, T) token rewards; padded positions are 0."""
    masked = token_rewards * mask
    if pooling == "last":
        return masked
    if pooling == "sum":
        return masked.cumsum(-1) * mask
    if pooling == "mean":
        counts = mask.cumsum(-1).clamp(min=1)
        return masked.cumsum(-1) / counts * mask
    raise ValueError(f"unknown pooling {pooling!r}")


def step_rewards(token_rewards: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(batch, T) r(y_t | x, y<t), the per-step reward that Eq. 5-6 add to log π at each token.

    For a sequence-level head it is the head on the prefix y<=t (its prefix
    reward); for a token-level RM (pooling "sum", GenARM) it is the token's own
    reward. Summing GenARM's running-sum prefix rewards instead would weight
    y_s by (T - s + 1) and count early tokens many times.
    """
    if pooling == "sum":
        return token_rewards * mask
    return prefix_rewards(token_rewards, mask, pooling)


def sequence_rewards(token_rewards: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(batch,) reward of each whole response: the prefix reward at its last real token."""
    prefix = prefix_rewards(token_rewards, mask, pooling)
    last = (mask.sum(-1) - 1).clamp(min=0)
    return prefix.gather(1, last[:, None]).squeeze(1)


@dataclass
class PoolingState:
    """What ARGS carries between steps to extend prefix rewards by one token."""

    total: torch.Tensor  # (batch,) sum of chosen token rewards so far
    count: torch.Tensor  # (batch,) number of chosen tokens so far

    @classmethod
    def empty(cls, batch: int, device) -> PoolingState:
        return cls(torch.zeros(batch, device=device), torch.zeros(batch, device=device))

    def extend(self, candidate_rewards: torch.Tensor, pooling: str) -> torch.Tensor:
        """(batch, k) prefix rewards of y<t + each candidate."""
        if pooling == "last":
            return candidate_rewards
        if pooling == "sum":
            return self.total[:, None] + candidate_rewards
        return (self.total[:, None] + candidate_rewards) / (self.count[:, None] + 1)

    def commit(self, chosen_rewards: torch.Tensor) -> None:
        self.total = self.total + chosen_rewards
        self.count = self.count + 1


class RewardHead(nn.Module):
    """Base class of heads: subclasses set `pooling` and implement `token_rewards`."""

    pooling = "last"

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:  # (B, T, H), (B,) -> (B, T)
        raise NotImplementedError

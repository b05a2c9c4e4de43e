"""Global RM and Global RM-v2: non-personalized Bradley-Terry baselines (paper §6).

- Global RM: a linear head on the last response token's state, r(x,y) = wᵀh_T + b;
  the prefix reward of y<=t is wᵀh_t + b (the head read at t).
- Global RM-v2: the same per-token head, but the sequence reward is the mean
  of per-token rewards, and the prefix reward of y<=t the running mean.

Both train with −log σ(r_w − r_l) on the train users' pairs pooled together.
Head LR 1e-4 (appendix F.1, "Vanilla & Vanilla-V2").

    persalign run configs/news_category.yaml methods='[{name: global_rm}, {name: global_rm_v2}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import MethodSettings, setting


class LinearTokenHead(nn.Module):
    def __init__(self, hidden_size: int, pooling: str):
        super().__init__()
        self.pooling = pooling
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.linear.weight, std=1.0 / hidden_size)
        nn.init.zeros_(self.linear.bias)

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return self.linear(states).squeeze(-1)


@dataclass
class GlobalRMSettings(MethodSettings):
    """Global RM (Vanilla) and Global RM-v2: one reward head for everyone (no user parameters are used)."""

    head_lr: float = setting(1e-4, "learning rate of the reward head", paper="1e-4 (Vanilla, Vanilla-V2)")


@register_method("global_rm")
class GlobalRM(RewardMethod):
    """Non-personalized BT reward: linear head on the last token's state."""

    name, display = "global_rm", "Global RM"
    Settings = GlobalRMSettings
    head_pooling = "last"

    def make_head(self) -> nn.Module:
        return LinearTokenHead(self.hidden_size, self.head_pooling)


@register_method("global_rm_v2")
class GlobalRMv2(GlobalRM):
    """Non-personalized BT reward: mean of per-token rewards (prefix: running mean); the rest as Global RM."""

    name, display = "global_rm_v2", "Global RM-v2"
    head_pooling = "mean"

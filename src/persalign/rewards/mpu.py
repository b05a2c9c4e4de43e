"""MPU and MPU-Avg: a small MLP per user on the shared backbone features (paper §6 baselines).

r_u(x, y<=t) = w2_uᵀ ReLU(W1_u h_t + b1_u) + b2_u, one MLP (hidden 16) per user,
on the shared (frozen or LoRA) backbone state h_t. Decoder LR 1e-3 (appendix F).

- MPU: a new user gets a fresh MLP, fitted on its support set.
- MPU-Avg: a new user starts from the average of the train users' MLPs
  (the population model), then adapts on its support set.

    persalign run configs/news_category.yaml methods='[{name: mpu}, {name: mpu_avg}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import COUNT, PersonalizedSettings, setting


@dataclass
class MPUSettings(PersonalizedSettings):
    """MPU / MPU-Avg: every user's own small MLP on the backbone state (all parameters are per user)."""

    head_lr: float = setting(1e-3, "learning rate of the shared parameters (MPU has none: kept for the schedule)",
                             paper="1e-3 (decoder LR)")
    user_lr: float = setting(1e-3, "learning rate of each user's MLP", paper="1e-3 (decoder LR)")
    mlp_hidden: int = setting(16, "hidden units of each user's MLP", COUNT)


class PerUserMLP(nn.Module):
    pooling, per_user = "last", ("w1", "b1", "w2", "b2")

    def __init__(self, hidden_size: int, mlp_hidden: int, generator: torch.Generator):
        super().__init__()
        self.hidden_size = hidden_size
        self.w1 = nn.Parameter(torch.randn(1, hidden_size, mlp_hidden, generator=generator) / hidden_size ** 0.5)
        self.b1 = nn.Parameter(torch.zeros(1, mlp_hidden))
        self.w2 = nn.Parameter(torch.randn(1, mlp_hidden, generator=generator) / mlp_hidden ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(1))

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(torch.einsum("bth,bhm->btm", states, self.w1[users]) + self.b1[users][:, None])
        return torch.einsum("btm,bm->bt", hidden, self.w2[users]) + self.b2[users][:, None]


@register_method("mpu")
class MPU(RewardMethod):
    """A small MLP per user; new users start from a fresh random MLP."""

    name, display, personalized = "mpu", "MPU", True
    Settings = MPUSettings

    def make_head(self) -> nn.Module:
        return PerUserMLP(self.hidden_size, self.settings.mlp_hidden, torch.Generator().manual_seed(self.settings.seed))

    def new_user_row(self, name: str, table: torch.Tensor, user: str) -> torch.Tensor:
        generator = self.user_generator(user, salt=("w1", "b1", "w2", "b2").index(name))
        if name == "w1":
            return torch.randn(table.shape[1:], generator=generator) / self.hidden_size ** 0.5
        if name == "w2":
            return torch.randn(table.shape[1:], generator=generator) / self.settings.mlp_hidden ** 0.5
        return torch.zeros_like(table[0])


@register_method("mpu_avg")
class MPUAvg(MPU):
    """MPU whose new users start from the average of the trained users' MLPs."""

    name, display = "mpu_avg", "MPU-Avg"

    def new_user_row(self, name: str, table: torch.Tensor, user: str) -> torch.Tensor:
        trained = self.train_user_rows(table)  # row 0 is the generic user; adapted users never count
        return trained.mean(0) if len(trained) else super().new_user_row(name, table, user)

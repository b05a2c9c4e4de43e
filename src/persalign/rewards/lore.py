"""LoRE and LoRE-Alt: low-rank reward bases with per-user convex weights (paper appendix E).

K shared reward bases R_φ(x,y) ∈ R^K (a linear map of the backbone state);
each user a weight vector w_u on the simplex (w_u = softmax(a_u), so it is
always a convex combination); reward R_w(x,y) = w_uᵀ R_φ(x,y)   (Eq. 9).
Loss: -log σ(w_uᵀ[R_φ(x,y+) - R_φ(x,y-)]) (Eq. 10-13, the logsigmoid form).

- LoRE trains w and φ jointly (one step on both per batch).
- LoRE-Alt alternates per batch: one step on w (φ frozen), one on φ (w frozen).
  The original's regulariser towards a pretrained RM is omitted, as in the paper.

A new user starts from uniform weights and fits only w_u on its support set.
Defaults (appendix F): latent dim 8 (LoRE) / 20 (LoRE-Alt) for PRISM/LaMP,
2 for TL;DR; "decoder" (user weight) LR 0.5; bases LR 1e-3 (frozen features).

    persalign run configs/news_category.yaml methods='[{name: lore}, {name: lore_alt}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.base import reward_map
from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import PersonalizedSettings, latent_dim, setting


class LoreHead(nn.Module):
    pooling, per_user = "last", ("user_logits",)

    def __init__(self, hidden_size: int, settings: LoRESettings):
        super().__init__()
        self.bases = reward_map(hidden_size, settings.latent_dim)
        self.user_logits = nn.Parameter(torch.zeros(1, settings.latent_dim))

    def weights(self, users: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.user_logits[users], dim=-1)

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return torch.einsum("btk,bk->bt", self.bases(states), self.weights(users))


@dataclass
class LoRESettings(PersonalizedSettings):
    """LoRE: K reward bases shared by everyone, a simplex weight vector per user."""

    head_lr: float = setting(1e-3, "learning rate of the reward bases")
    user_lr: float = setting(0.5, "learning rate of each user's weight logits", paper="0.5 (decoder LR)")
    latent_dim: int = latent_dim(8, "number of reward bases K")


@dataclass
class LoREAltSettings(LoRESettings):
    latent_dim: int = latent_dim(20, "number of reward bases K", paper="20 on PRISM and Pref-LaMP")


@register_method("lore")
class LoRE(RewardMethod):
    """Reward bases + per-user simplex weights, trained jointly."""

    name, display, personalized = "lore", "LoRE", True
    Settings, Head = LoRESettings, LoreHead


@register_method("lore_alt")
class LoREAlt(LoRE):
    """LoRE with alternating steps: user weights (bases frozen), then bases (weights frozen)."""

    name, display = "lore_alt", "LoRE-Alt"
    Settings = LoREAltSettings
    alternate = True

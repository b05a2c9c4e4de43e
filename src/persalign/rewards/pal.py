"""PAL (Chen et al. 2025): users as mixtures of K shared prototypes (ideal points).

A projector f maps the backbone state h_t into a d-dimensional preference
space; K prototype points p_1..p_K live in that space; user u's ideal point
is a_u = Σ_k w_uk p_k with w_u on the simplex (softmax of learnt logits).
The reward of y<=t is the negative squared distance to the ideal point,
r_u(x, y<=t) = -||f(h_t) - a_u||², so closer responses are preferred (the
ideal-point model). A new user fits only its mixture weights.

Unlike the paper (which could not run PAL under ARGS), the reward is read
per position like every head here, so policy accuracy and ARGS work for PAL.
Defaults (appendix F): latent dim 8 (PRISM/LaMP), 2 (TL;DR); projector LR
1e-4 with weight decay 0.01; user weights LR 5e-3 (500 adaptation steps: at
that LR, 100 steps cannot move a new user's mixture far from uniform).

    persalign run configs/news_category.yaml methods='[{name: pal}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import COUNT, NON_NEGATIVE, PersonalizedSettings, latent_dim, setting


@dataclass
class PALSettings(PersonalizedSettings):
    """PAL: K prototype points in a learnt preference space; each user mixes them (simplex weights)."""

    head_lr: float = setting(1e-4, "learning rate of the projector f and the prototypes", paper="1e-4")
    weight_decay: float = setting(0.01, "weight decay of the projector and prototypes", NON_NEGATIVE, paper="0.01")
    user_lr: float = setting(5e-3, "learning rate of each user's mixture logits", paper="5e-3, no weight decay")
    adapt_epochs: int = setting(500, "epochs fitting a new user's mixture (at LR 5e-3, 100 cannot move it far from "
                                "uniform; reward.adapt_epochs, when set, overrides)", COUNT, run_level="override")
    latent_dim: int = latent_dim(8, "dimension d of the preference space")
    prototypes: int = setting(4, "number of prototype points K each user mixes", COUNT)


class PalHead(nn.Module):
    pooling, per_user = "last", ("mixture_logits",)

    def __init__(self, hidden_size: int, settings: PALSettings, generator: torch.Generator):
        super().__init__()
        self.projector = nn.Linear(hidden_size, settings.latent_dim)
        self.prototypes = nn.Parameter(torch.randn(settings.prototypes, settings.latent_dim, generator=generator))
        self.mixture_logits = nn.Parameter(torch.zeros(1, settings.prototypes))

    def ideal_points(self, users: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.mixture_logits[users], dim=-1) @ self.prototypes

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return -((self.projector(states) - self.ideal_points(users)[:, None]) ** 2).sum(-1)


@register_method("pal")
class PAL(RewardMethod):
    """Prototype mixtures: reward = -distance of f(h) to the user's ideal point."""

    name, display, personalized = "pal", "PAL", True
    Settings = PALSettings

    def make_head(self) -> nn.Module:
        return PalHead(self.hidden_size, self.settings, torch.Generator().manual_seed(self.settings.seed))

    def new_user_row(self, name: str, table: torch.Tensor, user: str) -> torch.Tensor:
        # Break the symmetry between prototypes for each new user, deterministically (by the user's name).
        generator = self.user_generator(user)
        return 0.01 * torch.randn(table.shape[1:], generator=generator)

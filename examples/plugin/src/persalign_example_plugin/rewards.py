"""User-offset RM: a global linear reward plus a low-rank offset per user, as a persalign plugin.

    r_u(x, y<=t) = (w + B z_u)ᵀ h_t

w (hidden) and the basis B (hidden × rank) are shared; z_u (rank) is user u's
code, zero for a new user until adaptation fits it on the user's support pairs
(θ = {w, B} frozen). Nothing here touches persalign's source: the method is a
`RewardMethod` subclass with its own `Settings`, found by the entry point in
this package's pyproject.toml (`persalign.methods`), or by its path:

    pip install -e examples/plugin
    persalign run demo-baselines 'methods=[{name: user_offset, offset_rank: 2}]' policies=[tiny-llama]
    persalign run demo-baselines 'methods=[{name: "persalign_example_plugin.rewards:UserOffsetRM"}]'
    persalign list --method user_offset
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import COUNT, PersonalizedSettings, setting


@dataclass
class UserOffsetSettings(PersonalizedSettings):
    """User-offset RM: a global linear reward w plus a per-user offset B z_u of low rank."""

    head_lr: float = setting(1e-3, "learning rate of the global weights w and the offset basis B")
    user_lr: float = setting(1e-2, "learning rate of each user's code z_u")
    offset_rank: int = setting(4, "rank of the per-user offset (the size of z_u)", COUNT)


class UserOffsetHead(nn.Module):
    pooling = "last"  # the reward of a sequence is the reward at its last token

    def __init__(self, hidden_size: int, rank: int, generator: torch.Generator):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.basis = nn.Parameter(torch.randn(hidden_size, rank, generator=generator) / hidden_size ** 0.5)
        self.user_codes = nn.Parameter(torch.zeros(1, rank))  # row 0: the generic user

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        weights = self.weight + self.user_codes[users] @ self.basis.T  # (batch, hidden)
        return torch.einsum("bth,bh->bt", states, weights.to(states.dtype))


class UserOffsetRM(RewardMethod):
    """A global linear RM plus a learnt low-rank offset per user."""

    name, display, personalized = "user_offset", "User-offset RM", True
    Settings = UserOffsetSettings

    def make_head(self) -> nn.Module:
        generator = torch.Generator().manual_seed(self.settings.seed)
        return UserOffsetHead(self.hidden_size, self.settings.offset_rank, generator)

    def user_tables(self) -> dict[str, nn.Parameter]:
        return {"user_codes": self.head.user_codes}

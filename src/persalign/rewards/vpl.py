"""VPL (Poddar et al. 2024): variational preference learning with a user latent z.

Encoder: each of a user's context pairs becomes a pair embedding
MLP([e(y_w); e(y_l)]); self-attention over the set, masked mean, then μ and
log σ² of a d-dimensional latent. Decoder: r(e, z) = MLP([e; z]) on the
backbone state e = h_t. Training: Bradley-Terry on pairs with z sampled
(reparameterised) from a random context set of the same user, plus
β·KL(q(z|context) || N(0, I)) with β annealed linearly from 0 to 0.01 over
500 steps. At evaluation z = μ of the user's support pairs: a new user is
adapted by one encoder pass, no gradient steps.

Defaults (appendix F, the original implementation's): LR 1e-4, weight decay
1e-3, latent dim 8, context sets of 8 pairs.

    persalign run configs/news_category.yaml methods='[{name: vpl}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.backbone import pad_states
from persalign.rewards.method import RewardMethod, precompute_features
from persalign.rewards.settings import NON_NEGATIVE, PersonalizedSettings, latent_dim, setting
from persalign.rewards.train import PairData, bradley_terry_loss

WIDTH, CONTEXT, KL_MAX, KL_ANNEAL_STEPS = 64, 8, 0.01, 500


class VplHead(nn.Module):
    pooling, per_user = "last", ("user_latent",)

    def __init__(self, hidden_size: int, dim: int):
        super().__init__()
        self.pair_encoder = nn.Sequential(nn.Linear(2 * hidden_size, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))
        self.attention = nn.MultiheadAttention(WIDTH, 4, batch_first=True)
        self.to_mu, self.to_logvar = nn.Linear(WIDTH, dim), nn.Linear(WIDTH, dim)
        self.decoder = nn.Sequential(nn.Linear(hidden_size + dim, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
        self.user_latent = nn.Parameter(torch.zeros(1, dim), requires_grad=False)  # μ of each known user

    def encode(self, chosen: torch.Tensor, rejected: torch.Tensor, mask: torch.Tensor):
        """(U, C, H) context states and (U, C) mask -> μ, log σ² of shape (U, d)."""
        pairs = self.pair_encoder(torch.cat([chosen, rejected], dim=-1))
        attended, _ = self.attention(pairs, pairs, pairs, key_padding_mask=~mask)
        weights = mask.unsqueeze(-1).float()
        pooled = (attended * weights).sum(1) / weights.sum(1).clamp(min=1)
        return self.to_mu(pooled), self.to_logvar(pooled)

    def rewards_given_z(self, states: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        expanded = z[:, None].expand(-1, states.shape[1], -1)
        return self.decoder(torch.cat([states, expanded], dim=-1)).squeeze(-1)

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return self.rewards_given_z(states, self.user_latent[users])


def last_states(backbone, data: PairData) -> tuple[torch.Tensor, torch.Tensor]:
    def last(responses):
        padded, mask = pad_states(backbone.states(data.prompts, responses))
        return padded[torch.arange(len(responses)), (mask.sum(-1) - 1).clamp(min=0)]

    return last(data.chosen), last(data.rejected)


@dataclass
class VPLSettings(PersonalizedSettings):
    """VPL: a variational encoder infers a user latent z from context pairs; a decoder reads r(e, z)."""

    head_lr: float = setting(1e-4, "learning rate of the encoder and the reward MLP", paper="1e-4")
    weight_decay: float = setting(1e-3, "weight decay of the reward MLP", NON_NEGATIVE, paper="0.001")
    user_lr: float = setting(1e-4, "learning rate of each user's latent", paper="1e-4")
    latent_dim: int = latent_dim(8, "dimension of the user latent z", paper=None)


@register_method("vpl")
class VPL(RewardMethod):
    """Variational user latent from context pairs; decoder r(e, z)."""

    name, display, personalized = "vpl", "VPL", True
    Settings = VPLSettings

    def make_head(self) -> nn.Module:
        self._contexts: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._generator = torch.Generator().manual_seed(self.settings.seed)
        self._kl = torch.zeros(())
        return VplHead(self.hidden_size, self.settings.latent_dim)

    def shared_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.head.named_parameters() if n != "user_latent"]

    # --- training: z sampled from a context set of the same user -----------------------------
    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().token_rewards(states, users)
        unique, rows = torch.unique(users, return_inverse=True)
        chosen, rejected, mask = [], [], []
        for user in unique.tolist():
            won, lost = self._contexts[user]
            pick = torch.randperm(len(won), generator=self._generator)[:CONTEXT]
            chosen.append(won[pick])
            rejected.append(lost[pick])
        chosen_pad, mask = pad_states(chosen)
        rejected_pad, _ = pad_states(rejected)
        mu, logvar = self.head.encode(chosen_pad, rejected_pad, mask)
        z = mu + torch.randn(mu.shape, generator=self._generator) * torch.exp(0.5 * logvar)
        self._kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1).mean()
        return self.head.rewards_given_z(states, z[rows])

    def loss(self, r_w, r_l, step):
        return bradley_terry_loss(r_w, r_l) + KL_MAX * min(1.0, step / KL_ANNEAL_STEPS) * self._kl

    def fit(self, backbone, train: PairData, val: PairData | None = None):
        for user in sorted(set(train.users) | set(val.users if val else [])):
            self.add_user(user)
        precompute_features(self, backbone, train, val)
        self._remember_contexts(backbone, train)
        log = super().fit(backbone, train, val)
        self.refresh_latents()
        return log

    def after_step(self) -> None:
        self.refresh_latents()  # validation (eval mode) reads μ from the table

    def adapt(self, backbone, user: str, support: PairData):
        """One encoder pass over the support pairs: z_k = μ(D_support)."""
        index = self.add_user(user)
        if len(support):
            self._remember_contexts(backbone, support)
            self.refresh_latents([index])
        return None

    def _remember_contexts(self, backbone, data: PairData) -> None:
        chosen, rejected = last_states(backbone, data)
        for user in sorted(set(data.users)):
            rows = [i for i, u in enumerate(data.users) if u == user]
            self._contexts[self.users[user]] = (chosen[rows], rejected[rows])

    @torch.no_grad()
    def refresh_latents(self, indices=None) -> None:
        indices = list(self._contexts) if indices is None else indices
        was_training = self.training
        self.eval()
        for index in indices:
            won, lost = self._contexts[index]
            mu, _ = self.head.encode(won[None], lost[None], torch.ones((1, len(won)), dtype=torch.bool))
            self.head.user_latent[index] = mu[0]
        self.train(was_training)

"""PReF as a pointwise reward (paper appendix D): R(u, y) = uᵀ φ(y), φ a linear head.

Warm start (D.3): build the (response pair × user) preference matrix (+1 if
the user preferred the canonical first response, -1 if the second; missing
entries 0), take its rank-K SVD: pair factors v_p ≈ φ(y1) - φ(y2) and user
vectors u. Then solve the bias-free least squares W·(e(y1) - e(y2)) ≈ v_p on
the backbone embeddings of each pair to initialise φ. Training then runs
end-to-end with Bradley-Terry (D.4).

Sparse real data (users sharing no pairs, as in PRISM and Pref-LaMP): with no
pair rated by two users the matrix carries no collaborative signal; the warm
start then falls back to the default initialisation and says so in the
training log (`init`). A new user starts from the mean of the train users'
vectors (never of users adapted earlier) and fits only u on its support set. Defaults (appendix F): decoder
LR 1e-3, weight decay 0.02, latent dim 8 (PRISM/LaMP), 2 (TL;DR).

    persalign run configs/news_category.yaml methods='[{name: pref}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from persalign.core.registry import register_method
from persalign.rewards.base import reward_map
from persalign.rewards.backbone import pad_states
from persalign.rewards.method import GENERIC_USER, RewardMethod, precompute_features
from persalign.rewards.settings import NON_NEGATIVE, PersonalizedSettings, latent_dim, setting
from persalign.rewards.train import PairData


class PrefHead(nn.Module):
    pooling, per_user = "last", ("user_vectors",)

    def __init__(self, hidden_size: int, settings: PReFSettings):
        super().__init__()
        k = settings.latent_dim
        self.phi = reward_map(hidden_size, k, bias=False)
        self.user_vectors = nn.Parameter(torch.full((1, k), 1.0 / k))

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return torch.einsum("btk,bk->bt", self.phi(states), self.user_vectors[users])


def preference_matrix(data: PairData, users: dict[str, int]) -> tuple[np.ndarray, list[int], list[tuple]]:
    """(pairs × users) matrix of ±1, the data row of each matrix row, and the canonical pair keys."""
    rows: dict[tuple, int] = {}
    first_row, entries = [], []
    for i, (user, prompt, chosen, rejected) in enumerate(zip(data.users, data.prompts, data.chosen, data.rejected)):
        a, b = tuple(chosen), tuple(rejected)
        key = (tuple(prompt),) + ((a, b) if a <= b else (b, a))
        if key not in rows:
            rows[key] = len(rows)
            first_row.append(i)
        entries.append((rows[key], users[user], 1.0 if a <= b else -1.0))
    matrix = np.zeros((len(rows), len(users)))
    for r, c, v in entries:
        matrix[r, c] = v
    return matrix, first_row, list(rows)


@dataclass
class PReFSettings(PersonalizedSettings):
    """PReF: R(u, y) = uᵀφ(y), warm-started from an SVD of the (pair × user) preference matrix."""

    head_lr: float = setting(1e-3, "learning rate of the feature map φ", paper="1e-3 (decoder LR)")
    weight_decay: float = setting(0.02, "weight decay of φ", NON_NEGATIVE, paper="0.02")
    user_lr: float = setting(1e-3, "learning rate of each user's vector u")
    latent_dim: int = latent_dim(8, "dimension of φ(y) and u")


@register_method("pref")
class PReF(RewardMethod):
    """Pointwise PReF: R(u,y) = uᵀφ(y), SVD + least-squares warm start, then BT."""

    name, display, personalized = "pref", "PReF", True
    Settings, Head = PReFSettings, PrefHead

    def new_user_row(self, name: str, table: torch.Tensor, user: str) -> torch.Tensor:
        rows = self.train_user_rows(table)
        return rows.mean(0) if len(rows) else table[0].clone()

    def fit(self, backbone, train: PairData, val: PairData | None = None):
        for user in sorted(set(train.users) | set(val.users if val else [])):
            self.add_user(user)
        precompute_features(self, backbone, train, val)
        self.init_note = self.warm_start(backbone, train)
        log = super().fit(backbone, train, val)
        return log

    @torch.no_grad()
    def warm_start(self, backbone, train: PairData) -> str:
        matrix, first_row, keys = preference_matrix(train, self.users)
        raters = (matrix != 0).sum(1)
        k = self.settings.latent_dim
        if raters.max(initial=0) < 2:
            return "default (no response pair is rated by two users: the SVD has no collaborative signal)"
        u, s, vt = np.linalg.svd(matrix, full_matrices=False)
        k_eff = min(k, int((s > 1e-8).sum()))
        pair_factors = u[:, :k_eff] * np.sqrt(s[:k_eff])
        user_factors = vt[:k_eff].T * np.sqrt(s[:k_eff])
        first = [train.chosen[i] if tuple(train.chosen[i]) == key[1] else train.rejected[i]
                 for i, key in zip(first_row, keys)]
        second = [train.rejected[i] if tuple(train.chosen[i]) == key[1] else train.chosen[i]
                  for i, key in zip(first_row, keys)]
        prompts = [train.prompts[i] for i in first_row]
        e1 = _last_states(backbone, prompts, first)
        e2 = _last_states(backbone, prompts, second)
        weights, *_ = np.linalg.lstsq((e1 - e2).numpy(), pair_factors, rcond=None)  # bias-free
        self.head.phi.weight.zero_()
        self.head.phi.weight[:k_eff] = torch.tensor(weights.T, dtype=torch.float32)
        table = self.head.user_vectors
        table.zero_()
        table[:, :k_eff] = torch.tensor(user_factors, dtype=torch.float32)
        table[self.users[GENERIC_USER]] = table[1:].mean(0)
        return f"svd (rank {k_eff}) + bias-free least squares"


def _last_states(backbone, prompts, responses) -> torch.Tensor:
    padded, mask = pad_states(backbone.states(prompts, responses))
    last = (mask.sum(-1) - 1).clamp(min=0)
    return padded[torch.arange(len(responses)), last]

"""GenARM (Xu et al. 2025): an autoregressive reward model with token-level rewards.

The ARM is a causal LM π_arm; its reward for token y_t is read from the state
BEFORE that token,

    r(x, y<=t) - r(x, y<t) = β · log π_arm(y_t | x, y<t),

so the reward of a prefix is the running SUM of token rewards and the
sequence reward is β · log π_arm(y | x). Trained with the reference-free loss

    L = −log σ(β (log π_arm(y_w | x) − log π_arm(y_l | x))),

which is exactly Bradley-Terry on these sequence rewards, so the shared
training loop applies unchanged. Under ARGS a step needs no candidate forward:
one ARM step over the vocabulary scores every candidate token at once.

π_arm here = the reward backbone's LM with a trainable rank-8 residual on its
last hidden state (h + U·D·h before the frozen LM head; U starts at zero, so
the ARM starts as the base LM); in `reward.mode=lora` the backbone's PEFT
LoRA adapter trains as well, as in the paper. GenARM is a global baseline
(one ARM for every user), as in the paper's tables.

Full-vocabulary log-softmax at every response token makes each training step
cost far more than a linear head: the default caps training at 150 steps
(stated in the cell's settings and the report).

    persalign run configs/news_category.yaml methods='[{name: genarm}]'
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from persalign.registry import register_method
from persalign.rewards.method import RewardMethod

RANK = 8


class GenArmHead(nn.Module):
    pooling = "sum"

    def __init__(self, hidden_size: int, beta: float, generator: torch.Generator):
        super().__init__()
        self.beta = beta
        self.down = nn.Parameter(torch.randn(RANK, hidden_size, generator=generator) / hidden_size ** 0.5)
        self.up = nn.Parameter(torch.zeros(hidden_size, RANK))
        self.bound = ()  # (the backbone's LM head,), bound at run time: a tuple so it is never a submodule

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """log π_arm(· | state) over the vocabulary, for states (..., H)."""
        if not self.bound:
            raise RuntimeError("GenARM needs its backbone's LM head: call method.bind(lm) or method.features(...)")
        output = self.bound[0]
        weight = output.weight
        adjusted = hidden + (hidden @ self.down.T) @ self.up.T
        logits = F.linear(adjusted.to(weight.dtype), weight, output.bias).float()
        return torch.log_softmax(logits, dim=-1)

    def token_rewards(self, features: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        hidden, tokens = features[..., :-1], features[..., -1].long()
        return self.beta * self.log_probs(hidden).gather(-1, tokens[..., None]).squeeze(-1)


@register_method("genarm")
class GenARM(RewardMethod):
    """Autoregressive RM: r_t = β log π_arm(y_t | x, y<t), prefix reward = running sum."""

    name, display = "genarm", "GenARM"
    token_level = True
    beta = 1.0
    default_head_lr = 1e-3
    default_max_steps = 150

    def make_head(self) -> nn.Module:
        return GenArmHead(self.hidden_size, self.beta, torch.Generator().manual_seed(self.settings.seed))

    def bind(self, lm) -> None:
        self.head.bound = (lm.model.get_output_embeddings(),)

    def features(self, backbone, prompts, responses) -> list[torch.Tensor]:
        """[state before y_t, y_t] per response token: states of (x[:-1]; x[-1], y<T) + the token ids."""
        self.bind(backbone.lm)
        shifted_prompts = [p[:-1] for p in prompts]
        shifted = [[p[-1]] + r[:-1] if r else [] for p, r in zip(prompts, responses)]
        states = backbone.states(shifted_prompts, shifted)
        return [torch.cat([s, torch.tensor(r, dtype=s.dtype, device=s.device)[:, None]], dim=-1)
                if len(r) else s.new_zeros((0, s.shape[-1] + 1)) for s, r in zip(states, responses)]

    def next_token_rewards(self, state: torch.Tensor, candidates: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """(rows, k) token rewards of candidate tokens after the prefix whose last state is `state`."""
        return self.beta * self.head.log_probs(state.float()).gather(-1, candidates)

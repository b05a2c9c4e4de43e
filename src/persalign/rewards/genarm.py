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
(stated in the cell's settings and the report). Token log-probabilities are
computed in chunks of `chunk_tokens` tokens (re-computed in backward through
torch.utils.checkpoint), so memory no longer grows with batch × length ×
vocabulary: one unchunked validation batch of 256 pairs held two
(512, T, 49152) float tensors and raised the study's peak from 3.4 to 9.0 GB.
Frozen mode reads the other methods' cached states shifted by one token
(`RewardBackbone.states_before`), so it needs no second feature pass.

    persalign run configs/news_category.yaml methods='[{name: genarm}]'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from persalign.core.registry import register_method
from persalign.rewards.method import RewardMethod
from persalign.rewards.settings import COUNT, MethodSettings, setting


@dataclass
class GenARMSettings(MethodSettings):
    """GenARM: a low-rank change of the backbone's next-token distribution is the reward."""

    head_lr: float = setting(1e-3, "learning rate of the low-rank adapter on the LM head's input")
    max_steps: int | None = setting(150, "cap on training steps (reward.max_steps, when set, overrides): every "
                                    "step scores the whole vocabulary at every response token", run_level="override")
    beta: float = setting(1.0, "β in r_t = β log π_arm(y_t | x, y<t) (scales every token reward)")
    rank: int = setting(8, "rank of the adapter W_up W_down added to the final hidden state", COUNT)


class GenArmHead(nn.Module):
    pooling = "sum"

    def __init__(self, hidden_size: int, settings: GenARMSettings, generator: torch.Generator):
        super().__init__()
        self.beta = settings.beta
        self.down = nn.Parameter(torch.randn(settings.rank, hidden_size, generator=generator) / hidden_size ** 0.5)
        self.up = nn.Parameter(torch.zeros(hidden_size, settings.rank))
        self.bound = ()  # (the backbone's LM head,), bound at run time: a tuple so it is never a submodule

    chunk_tokens = 1024  # tokens per vocabulary-wide block: ~200 MB of float logits at a 49k vocabulary
    # Where no gradient is kept (scoring, ARGS's win rate), blocks of at most this many logits: a 1024-token block
    # and its logsumexp held ~400 MB of a GenARM cell's peak (full news study). A block's rows are computed as in a
    # larger one (tests/test_genarm.py), so the scores are the same; training keeps its blocks, whose
    # gradients are summed block by block.
    scoring_logits = 2 ** 24

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if not self.bound:
            raise RuntimeError("GenARM needs its backbone's LM head: call method.bind(lm) or method.features(...)")
        output = self.bound[0]
        weight = output.weight
        adjusted = hidden + (hidden @ self.down.T) @ self.up.T
        # the LM head stays where the policy is (a GPU) while the cached features it is trained on are on the CPU
        logits = F.linear(adjusted.to(weight.device, weight.dtype), weight, output.bias).float()
        return logits.to(hidden.device)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """log π_arm(· | state) over the vocabulary, for states (..., H)."""
        return torch.log_softmax(self.logits(hidden), dim=-1)

    def _token_log_probs(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.logits(hidden)
        return logits.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    def block_tokens(self) -> int:
        """Tokens per vocabulary-wide block: `chunk_tokens` in training, fewer where no gradient is kept."""
        if torch.is_grad_enabled() or not self.bound:
            return self.chunk_tokens
        vocabulary = self.bound[0].weight.shape[0]
        return max(1, min(self.chunk_tokens, self.scoring_logits // vocabulary))

    def token_rewards(self, features: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        hidden = features[..., :-1].reshape(-1, features.shape[-1] - 1)
        tokens = features[..., -1].long().reshape(-1)
        blocks, size = [], self.block_tokens()
        for start in range(0, len(tokens), size):
            block = (hidden[start : start + size], tokens[start : start + size])
            if torch.is_grad_enabled():  # keep only the block's inputs; its logits are re-made in backward
                blocks.append(checkpoint(self._token_log_probs, *block, use_reentrant=False))
            else:
                blocks.append(self._token_log_probs(*block))
        flat = torch.cat(blocks) if blocks else hidden.new_zeros(0)
        return self.beta * flat.reshape(features.shape[:-1])


@register_method("genarm")
class GenARM(RewardMethod):
    """Autoregressive RM: r_t = β log π_arm(y_t | x, y<t), prefix reward = running sum."""

    name, display = "genarm", "GenARM"
    token_level = True
    Settings = GenARMSettings
    heavy_training = True  # vocabulary-wide log-softmax blocks: ~1.5-1.9 GiB a fit (the pool: `heavy_at_once`)
    heavy_cells = True  # its cells too (the λ grid's ARGS pass and the win rate's scoring): ~1.6 GiB a worker

    def make_head(self) -> nn.Module:
        return GenArmHead(self.hidden_size, self.settings, torch.Generator().manual_seed(self.settings.seed))

    def bind(self, lm) -> None:
        self.head.bound = (lm.model.get_output_embeddings(),)

    def features(self, backbone, prompts, responses) -> list[torch.Tensor]:
        """[state before y_t, y_t] per response token (frozen: the other methods' cached states, shifted)."""
        self.bind(backbone.lm)
        states = backbone.states_before(prompts, responses)
        return [torch.cat([s, torch.tensor(r, dtype=s.dtype, device=s.device)[:, None]], dim=-1)
                if len(r) else s.new_zeros((0, s.shape[-1] + 1)) for s, r in zip(states, responses)]

    def next_token_rewards(self, state: torch.Tensor, candidates: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """(rows, k) token rewards of candidate tokens after the prefix whose last state is `state`."""
        home = self.home(state.device)
        log_probs = self.head.log_probs(state.float().to(home))
        return (self.settings.beta * log_probs.gather(-1, candidates.to(home))).to(state.device)

"""P-DPO (Li et al. 2024): personalized soft prompts trained with DPO on the policy itself.

Each user u gets n soft tokens s_u = g + o_u (a generic embedding g shared by
everyone plus a per-user offset o_u; the "unknown user" is g alone),
prepended to the policy's input embeddings. With the frozen policy as
reference π_ref, the implicit reward and the loss are

    r_u(x, y) = β [log π_θ(y | s_u, x) − log π_ref(y | x)]
    DPO_u     = −log σ(r_u(x, y_w) − r_u(x, y_l))
    L         = α · DPO_{s_u}(known users) + (1 − α) · DPO_{g}(same pairs, generic tokens)

(`dpo_loss` below is written out directly and checked against a hand value
in tests). n = 8 soft tokens (appendix F). In `reward.mode=frozen` only the
soft tokens train; in `reward.mode=lora` the policy's PEFT LoRA adapter trains
too and π_ref is the same model with the adapter disabled. A new user adapts
only o_u on the support pairs (DPO_{s_u} alone: g is fixed then).

Deployment is plain greedy generation with the user's soft tokens (no RM, no
ARGS); P-DPO's policy accuracy uses its implicit reward; it has no RM
accuracy or win rate (its table cells read "-", as in the paper).

Every step back-propagates through the whole policy over prompt + response,
so on CPU the defaults cap training (`defaults.max_steps`, adaptation steps),
stated in the cell's settings. A step's pairs go through back-propagation
`pairs_per_backward` at a time, the personalized and the generic term
separately, with gradients accumulated (the same gradient as one batch):
activations of 8 pairs × 2 terms at once took the study to 8+ GB.

    persalign run configs/news_category.yaml methods='[{name: pdpo}]'
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from persalign.core.registry import register_method
from persalign.engine.decoding import Prefill, decode_from, greedy, left_pad
from persalign.engine.scoring import picked_logprobs, response_logprobs, right_pad
from persalign.models.loading import decoder_stack
from persalign.rewards.method import GENERIC_USER, load_parameters, save_parameters
from persalign.rewards.settings import COUNT, FRACTION, PersonalizedSettings, setting
from persalign.rewards.train import PairData, TrainLog


@dataclass
class PDPOSettings(PersonalizedSettings):
    """P-DPO: soft tokens before the prompt, a generic set plus a per-user offset, trained with DPO on the
    policy itself (CPU defaults cap the steps; the paper trains to convergence)."""

    head_lr: float = setting(1e-2, "learning rate of the generic soft tokens")
    user_lr: float = setting(1e-2, "learning rate of each user's soft-token offsets")
    batch_size: int | None = setting(8, "preference pairs per step (every pair is two policy passes with grad)",
                                     COUNT, run_level="fill")
    max_steps: int | None = setting(40, "cap on training steps (reward.max_steps, when set, overrides)", COUNT,
                                    run_level="override")
    adapt_epochs: int = setting(6, "optimisation steps fitting a new user's offsets (reward.adapt_epochs, when "
                                "set, overrides)", COUNT, run_level="override")
    soft_tokens: int = setting(8, "soft tokens prefilled before every prompt", COUNT, paper="8")
    beta: float = setting(0.1, "β of the DPO loss and of the implicit reward β log π_θ/π_ref")
    alpha: float = setting(0.5, "weight of the personalized term; 1 − α weighs the generic term", FRACTION)


def dpo_loss(policy_w, policy_l, reference_w, reference_l, beta: float) -> torch.Tensor:
    """−log σ(β[(log π_θ(y_w) − log π_ref(y_w)) − (log π_θ(y_l) − log π_ref(y_l))]), batch mean."""
    return -F.logsigmoid(beta * ((policy_w - reference_w) - (policy_l - reference_l))).mean()


def reference_context(lm):
    """π_ref: the same model with its LoRA adapter switched off (a no-op context when there is none)."""
    disable = getattr(lm.model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()


@register_method("pdpo")
class PDPO(nn.Module):
    """Soft-prompt DPO on the policy: deployment = generation with the user's tokens."""

    name, display, personalized = "pdpo", "P-DPO", True
    policy_side = True  # ranks and generates with the policy itself; no reward model, no ARGS
    deployments = ("soft_prompt",)
    Settings = PDPOSettings
    pairs_per_backward = 2  # memory, not a hyper-parameter: pairs whose graphs are held at once
    heavy_training = True  # back-propagates through the policy (the pool: `heavy_at_once`)

    def __init__(self, hidden_size: int, settings: PDPOSettings):
        super().__init__()
        self.hidden_size, self.settings = hidden_size, settings
        self.users: dict[str, int] = {GENERIC_USER: 0}
        generator = torch.Generator().manual_seed(settings.seed)
        self.generic = nn.Parameter(0.02 * torch.randn(settings.soft_tokens, hidden_size, generator=generator))
        self.offsets = nn.Parameter(torch.zeros(1, settings.soft_tokens, hidden_size))
        self.beta, self.alpha = settings.beta, settings.alpha

    def add_user(self, user: str) -> int:
        if user not in self.users:
            self.users[user] = len(self.users)
            with torch.no_grad():
                zeros = self.offsets.new_zeros(1, *self.offsets.shape[1:])
                self.offsets = nn.Parameter(torch.cat([self.offsets.data, zeros]))
        return self.users[user]

    def user_ids(self, users: list[str]) -> torch.Tensor:
        return torch.tensor([self.users.get(u, 0) for u in users], dtype=torch.long)

    @property
    def soft_token_count(self) -> int:  # prefilled before every prompt (counted in the deployment's cost)
        return self.settings.soft_tokens

    def soft_tokens(self, users: torch.Tensor, generic: bool = False) -> torch.Tensor:
        """(B, n, H) soft tokens of each row's user (the generic tokens for unknown users or `generic`)."""
        if generic:
            return self.generic.expand(len(users), -1, -1)
        return self.generic[None] + self.offsets[users]

    # --- log-probabilities with soft tokens ----------------------------------------------------
    def sequence_logprobs(self, lm, soft: torch.Tensor, prompts, responses) -> torch.Tensor:
        """Σ_t log π_θ(y_t | s, x, y<t) per row (differentiable in `soft` and any LoRA weights)."""
        ids, mask = right_pad([p + r for p, r in zip(prompts, responses)], lm.tokenizer.pad_token_id, lm.device)
        embeddings = lm.model.get_input_embeddings()(ids)
        n = soft.shape[1]
        inputs = torch.cat([soft.to(embeddings.dtype).to(embeddings.device), embeddings], dim=1)
        full_mask = torch.cat([mask.new_ones(len(prompts), n), mask], dim=1)
        hidden = decoder_stack(lm.model)(inputs_embeds=inputs, attention_mask=full_mask).last_hidden_state
        rows, cols, targets = [], [], []
        for row, (p, r) in enumerate(zip(prompts, responses)):
            rows += [row] * len(r)
            cols += range(n + len(p) - 1, n + len(p) + len(r) - 1)  # the state before each response token
            targets += r
        picked = picked_logprobs(lm.model.get_output_embeddings(), hidden[rows, cols],
                                 torch.tensor(targets, device=hidden.device))
        sums = torch.zeros(len(prompts), device=picked.device).index_add(
            0, torch.tensor(rows, device=picked.device), picked)
        return sums

    def reference_logprobs(self, lm, prompts, responses, batch_size: int = 16) -> torch.Tensor:
        with reference_context(lm):
            return torch.tensor([float(lp.sum()) for lp in response_logprobs(lm, prompts, responses, batch_size)])

    @torch.no_grad()
    def implicit_rewards(self, lm, users: list[str], prompts, responses, batch_size: int = 16,
                         reference: torch.Tensor | None = None) -> np.ndarray:
        """r_u(x, y) = β [log π_θ(y | s_u, x) − log π_ref(y | x)] per response."""
        reference = self.reference_logprobs(lm, prompts, responses, batch_size) if reference is None else reference
        out = []
        for start in range(0, len(prompts), batch_size):
            part = slice(start, start + batch_size)
            soft = self.soft_tokens(self.user_ids(users[part]))
            out.append(self.sequence_logprobs(lm, soft, prompts[part], responses[part]).cpu())
        return (self.beta * (torch.cat(out) - reference)).numpy() if out else np.zeros(0)

    # --- learning -------------------------------------------------------------------------------
    def _train(self, lm, data: PairData, lr_groups: list[dict], steps: int, with_generic: bool) -> TrainLog:
        optimizer = torch.optim.AdamW(lr_groups)
        trained = {id(p) for group in lr_groups for p in group["params"]}
        frozen = [p for p in lm.model.parameters() if p.requires_grad and id(p) not in trained]
        for p in frozen:  # no gradients for the policy weights that do not train (memory and time)
            p.requires_grad_(False)
        try:
            return self._steps(lm, data, optimizer, steps, with_generic)
        finally:
            for p in frozen:
                p.requires_grad_(True)

    def _steps(self, lm, data, optimizer, steps, with_generic) -> TrainLog:
        """`steps` DPO steps; π_ref log-probs only for the pairs a step uses (capped runs see few pairs)."""
        s = self.settings
        reference: dict[int, tuple[float, float]] = {}
        generator = torch.Generator().manual_seed(s.seed)
        log, order = TrainLog(), []
        batch = min(s.batch_size, len(data))
        bar = tqdm(total=steps, desc="P-DPO steps", unit="step", leave=False, disable=True if steps < 10 else None)
        while log.steps < steps:
            if len(order) < batch:
                order += torch.randperm(len(data), generator=generator).tolist()
                log.epochs += 1
            index, order = order[:batch], order[batch:]
            sub = data.subset(index)
            new = [i for i in dict.fromkeys(index) if i not in reference]
            if new:
                part = data.subset(new)
                both = self.reference_logprobs(lm, part.prompts * 2, part.chosen + part.rejected)
                reference.update({i: (float(both[k]), float(both[len(new) + k])) for k, i in enumerate(new)})
            reference_w = torch.tensor([reference[i][0] for i in index])
            reference_l = torch.tensor([reference[i][1] for i in index])
            optimizer.zero_grad()
            loss = self._accumulate_gradients(lm, sub, reference_w, reference_l, with_generic)
            optimizer.step()
            log.steps += 1
            log.tokens += sum(2 * (len(p) + self.settings.soft_tokens) + len(won) + len(lost)
                              for p, won, lost in zip(sub.prompts, sub.chosen, sub.rejected))
            log.history.append({"step": log.steps, "loss": loss})
            bar.update(1)
        bar.close()
        return log

    def _accumulate_gradients(self, lm, sub: PairData, reference_w, reference_l, with_generic: bool) -> float:
        """Backward of α·DPO_{s_u} + (1 − α)·DPO_g over `sub`, a few pairs and one term at a time; the loss."""
        users = self.user_ids(sub.users)
        terms = [(self.alpha if with_generic else 1.0, False)] + ([(1 - self.alpha, True)] if with_generic else [])
        total = 0.0
        for start in range(0, len(sub), self.pairs_per_backward):
            part = list(range(start, min(start + self.pairs_per_backward, len(sub))))
            share = len(part) / len(sub)  # dpo_loss is a mean over pairs
            for weight, generic in terms:
                loss = weight * share * self._pair_loss(lm, self.soft_tokens(users[part], generic=generic),
                                                        sub.subset(part), reference_w[part], reference_l[part])
                loss.backward()
                total += float(loss.detach())
        return total

    def _pair_loss(self, lm, soft, sub: PairData, reference_w, reference_l) -> torch.Tensor:
        both = self.sequence_logprobs(lm, torch.cat([soft, soft]), sub.prompts * 2, sub.chosen + sub.rejected)
        return dpo_loss(both[: len(sub)], both[len(sub):], reference_w.to(both.device), reference_l.to(both.device),
                        self.beta)

    def fit(self, lm, train: PairData, val: PairData | None = None) -> TrainLog:
        for user in sorted(set(train.users) | set(val.users if val else [])):
            self.add_user(user)
        s = self.settings
        lora = [p for n, p in lm.model.named_parameters() if p.requires_grad and "lora_" in n]
        groups = [{"params": [self.generic], "lr": s.head_lr}, {"params": [self.offsets], "lr": s.user_lr}]
        if lora:
            groups.append({"params": lora, "lr": s.backbone_lr})
        self.train()
        log = self._train(lm, train, groups, s.max_steps or s.epochs * max(1, len(train) // s.batch_size), True)
        self.eval()
        if val is not None and len(val):
            won = self.implicit_rewards(lm, val.users, val.prompts, val.chosen)
            lost = self.implicit_rewards(lm, val.users, val.prompts, val.rejected)
            log.best_val_accuracy = float(100 * np.mean(won > lost))
        return log

    def adapt(self, lm, user: str, support: PairData) -> TrainLog | None:
        """o_u = argmin DPO_{s_u} on the support pairs; g and the policy stay fixed."""
        index = self.add_user(user)
        if len(support) == 0:
            return None
        self.generic.requires_grad_(False)
        hook = self.offsets.register_hook(lambda grad: grad * (torch.arange(len(grad))[:, None, None] == index))
        try:
            return self._train(lm, support, [{"params": [self.offsets], "lr": self.settings.user_lr,
                                                  "weight_decay": 0.0}], self.settings.adapt_epochs, False)
        finally:
            hook.remove()
            self.generic.requires_grad_(True)

    # --- deployment: generation with the user's soft tokens -------------------------------------
    @torch.no_grad()
    def generate(self, lm, users: list[str], prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        ids, mask, _ = left_pad(prompts, lm.tokenizer.pad_token_id, lm.device)
        soft = self.soft_tokens(self.user_ids(users)).to(lm.device)
        embeddings = lm.model.get_input_embeddings()(ids)
        rows, width = ids.shape
        n = soft.shape[1]
        inputs = embeddings.new_zeros((rows, width + n, embeddings.shape[-1]))
        full_mask = mask.new_zeros((rows, width + n))
        for row, prompt in enumerate(prompts):
            start = width - len(prompt)  # left padding: soft tokens go right before the prompt
            inputs[row, :start] = embeddings[row, :start]
            inputs[row, start : start + n] = soft[row].to(embeddings.dtype)
            inputs[row, start + n :] = embeddings[row, start:]
            full_mask[row, start:] = 1
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        out = lm.model(inputs_embeds=inputs, attention_mask=full_mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1)
        state = Prefill(full_mask, positions, out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), -1),
                        width + n)
        return decode_from(lm, state, greedy, max_new_tokens)

    # --- persistence (shared with reward methods: safetensors + JSON, no pickle) ---------------
    def save(self, folder: str | Path) -> None:
        save_parameters(self, folder)

    @classmethod
    def load(cls, folder: str | Path) -> PDPO:
        return load_parameters(cls, folder)

"""The Bradley-Terry training loop, written directly (no library trainer).

loss = -log sigma(R(x, y_w) - R(x, y_l)), logged with accuracy and margin;
validation accuracy after every epoch drives early stopping (the best
parameters are restored). Without a validation set (adaptation to a new
user's support pairs) the loop runs its whole budget and keeps the FINAL
parameters: selecting on running training accuracy saturates within a few
epochs on small support sets and rolled users back to barely-trained values.
Minibatch order comes from a seeded generator.
Methods reuse it for `fit` (shared + user parameters) and for `adapt` (only
the new user's parameters), and may pass their own `loss_fn` (e.g. a KL term).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from persalign.rewards.backbone import pad_states


@dataclass
class PairData:
    """Preference pairs as token ids (states come from the backbone, cached when frozen)."""

    users: list[str]
    prompts: list[list[int]]
    chosen: list[list[int]]
    rejected: list[list[int]]

    def __len__(self) -> int:
        return len(self.users)

    def subset(self, index) -> PairData:
        return PairData(*([getattr(self, f)[i] for i in index] for f in ("users", "prompts", "chosen", "rejected")))


def pair_data(dataset, ids_by_user: dict[str, list[str]], formatter, users: list[str]) -> PairData:
    """The listed users' pairs (ids per user, e.g. a split's train or support ids) as token ids."""
    comparisons = {c.id: c for c in dataset.comparisons}
    data = PairData([], [], [], [])
    for user in users:
        for pair_id in ids_by_user.get(user, []):
            c = comparisons[pair_id]
            data.users.append(user)
            data.prompts.append(formatter.prompt_ids(c.prompt, history=c.history))
            data.chosen.append(formatter.response_ids(c.chosen))
            data.rejected.append(formatter.response_ids(c.rejected))
    return data


@dataclass
class TrainLog:
    epochs: int = 0
    steps: int = 0
    tokens: int = 0  # tokens read by the trained path, summed over optimizer steps (counted cost)
    best_val_accuracy: float = float("nan")
    history: list[dict] = field(default_factory=list)


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    return -F.logsigmoid(r_chosen - r_rejected).mean()


def pair_rewards(method, backbone, data: PairData, index: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence rewards of chosen and rejected responses for the pairs in `index`."""
    sub = data.subset(index)
    states = method.features(backbone, sub.prompts + sub.prompts, sub.chosen + sub.rejected)
    padded, mask = pad_states(states)
    users = method.user_ids(sub.users + sub.users)
    rewards = method.sequence_rewards(padded, mask, users)
    return rewards[: len(index)], rewards[len(index):]


@torch.no_grad()
def evaluate_pairs(method, backbone, data: PairData, batch_size: int = 256) -> dict[str, float]:
    if len(data) == 0:
        return {"accuracy": float("nan"), "loss": float("nan")}
    correct, losses = 0.0, 0.0
    for start in range(0, len(data), batch_size):
        index = list(range(start, min(start + batch_size, len(data))))
        r_w, r_l = pair_rewards(method, backbone, data, index)
        correct += float((r_w > r_l).sum())
        losses += float(bradley_terry_loss(r_w, r_l)) * len(index)
    return {"accuracy": 100 * correct / len(data), "loss": losses / len(data)}


@dataclass
class TrainSchedule:
    """How long and in which steps to train (the loss and the after-step hook are the method's own)."""

    epochs: int
    batch_size: int
    patience: int  # epochs without a better validation score before stopping (only with a validation set)
    seed: int
    max_steps: int | None = None
    alternate: bool = False  # each parameter group is its own phase, one step per phase per minibatch (LoRE-Alt)


@dataclass
class _Training:
    method: object
    backbone: object
    data: PairData
    phases: list
    schedule: TrainSchedule
    log: TrainLog = field(default_factory=TrainLog)


def _train_epoch(run: _Training, order: list[int]) -> dict:
    """One pass over `order` in minibatches (one step per phase each); returns loss/accuracy/margin sums."""
    totals = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0}
    loss_fn, on_step = getattr(run.method, "loss", None), getattr(run.method, "after_step", None)
    size, max_steps = run.schedule.batch_size, run.schedule.max_steps
    for start in range(0, len(order), size):
        index = order[start : start + size]
        for optimizer in run.phases:
            r_w, r_l = pair_rewards(run.method, run.backbone, run.data, index)
            run.log.tokens += sum(len(run.data.chosen[i]) + len(run.data.rejected[i]) for i in index)
            loss = loss_fn(r_w, r_l, run.log.steps) if loss_fn else bradley_terry_loss(r_w, r_l)
            for other in run.phases:
                other.zero_grad()
            loss.backward()
            optimizer.step()
            if on_step:
                on_step()
        run.log.steps += 1
        totals["loss"] += float(loss.detach()) * len(index)
        totals["accuracy"] += float((r_w > r_l).float().sum()) * 100
        totals["margin"] += float((r_w - r_l).detach().sum())
        if max_steps and run.log.steps >= max_steps:
            break
    return totals


def train_pairs(method, backbone, data: PairData, val: PairData | None, parameter_groups: list[dict],
                schedule: TrainSchedule) -> TrainLog:
    """Minimise the method's loss (`method.loss(r_w, r_l, step)`, else Bradley-Terry) with AdamW.

    With a validation set, early-stop on its accuracy (loss breaks ties) and
    keep the best epoch's parameters; without one, run the whole budget and
    keep the final parameters.
    """
    parameter_groups = [g for g in parameter_groups if g["params"]]
    params = [p for group in parameter_groups for p in group["params"]]
    phases = ([torch.optim.AdamW([g]) for g in parameter_groups] if schedule.alternate
              else [torch.optim.AdamW(parameter_groups)])
    generator = torch.Generator().manual_seed(schedule.seed)
    run = _Training(method, backbone, data, phases, schedule)
    log, best_state, stale, max_steps = run.log, None, 0, schedule.max_steps
    validated = val is not None and len(val) > 0
    best = -math.inf
    for epoch in range(schedule.epochs):
        method.train()
        order = torch.randperm(len(data), generator=generator).tolist()
        totals = _train_epoch(run, order)
        method.eval()
        record = {"epoch": epoch, **{f"train_{k}": v / len(data) for k, v in totals.items()}}
        score = record["train_accuracy"]
        if validated:
            measured = evaluate_pairs(method, backbone, val)
            record.update({f"val_{k}": v for k, v in measured.items()})
            score = measured["accuracy"] - 1e-3 * measured["loss"]  # loss breaks accuracy ties
        log.history.append(record)
        log.epochs = epoch + 1
        if not validated:
            if max_steps and log.steps >= max_steps:
                break
            continue
        if score > best:
            best, stale = score, 0
            best_state = [p.detach().clone() for p in params]
            log.best_val_accuracy = record.get("val_accuracy", float("nan"))
        else:
            stale += 1
        if stale >= schedule.patience or (max_steps and log.steps >= max_steps):
            break
    if best_state is not None:
        with torch.no_grad():
            for p, saved in zip(params, best_state):
                p.copy_(saved)
    return log

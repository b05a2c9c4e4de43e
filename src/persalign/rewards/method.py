"""RewardMethod: what every registered reward method is (DESIGN.md's one interface).

    fit(train, val)          learn shared parameters θ and train users' z_k
    adapt(user, support)     z_k = A(D_support, θ) for an unseen user, θ frozen
    token_rewards / prefix_rewards / step_rewards / sequence_rewards
    save(dir) / load(dir)    safetensors + JSON, no pickle

Subclasses define `make_head()` (an nn.Module with `pooling` and
`token_rewards(states, users)`), which parameters are shared vs per-user, and
optionally their own loss. Global methods ignore users.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from persalign.core.files import fields, read_json, read_tensors, write_atomic
from persalign.rewards import base
from persalign.rewards.settings import MethodSettings, resolve
from persalign.rewards.train import PairData, TrainLog, TrainSchedule, train_pairs

GENERIC_USER = "<generic>"


def resolve_settings(method_cls, method_config, reward_config, seed: int) -> MethodSettings:
    """The settings of `method_cls` for one run and seed (see rewards/settings.py for the precedence)."""
    return resolve(method_cls.Settings, method_config.settings, reward_config, seed)


def precompute_features(method, backbone, *datasets) -> None:
    """Frozen mode: compute every state once, in one fixed batching, before training.

    Computed lazily per minibatch instead, the first fit would see features whose
    float rounding depends on which pairs shared a padded batch, and two fits
    with the same seed could differ.
    """
    if backbone.trainable or getattr(method, "pretrained", False):  # nothing to train on them
        return
    prompts, responses = [], []
    for data in (d for d in datasets if d is not None):
        prompts += data.prompts * 2
        responses += data.chosen + data.rejected
    if prompts:
        method.features(backbone, prompts, responses)


def save_parameters(method: nn.Module, folder: str | Path) -> None:
    """Any method with name, hidden_size, users and settings: tensors as safetensors, the rest as JSON."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in method.state_dict().items()},
              str(folder / "head.safetensors"))
    meta = {"method": method.name, "hidden_size": method.hidden_size, "users": method.users,
            "settings": asdict(method.settings), "fitted_rows": getattr(method, "fitted_rows", None)}
    write_atomic(folder / "head.json", json.dumps(meta, indent=2))


def load_parameters(cls, folder: str | Path):
    """Rebuild a method saved by `save_parameters` (users re-added in their original order; no pickle)."""
    folder = Path(folder)
    meta = read_json(folder / "head.json", fields({"hidden_size": int, "users": dict, "settings": dict}))
    method = cls(meta["hidden_size"], cls.Settings(**meta["settings"]))
    for user in sorted(meta["users"], key=meta["users"].get):
        method.add_user(user)
    method.load_state_dict(read_tensors(folder / "head.safetensors"))
    method.fitted_rows = meta.get("fitted_rows")
    return method.eval()


def _only_row(grad: torch.Tensor, row: int) -> torch.Tensor:
    """Zero every user's gradient but one: Adam then leaves the other rows exactly as they were."""
    masked = torch.zeros_like(grad)
    masked[row] = grad[row]
    return masked


class RewardMethod(nn.Module):
    name = "base"
    display = "Base"
    personalized = False
    Settings = MethodSettings  # a method's own subclass, in its file, adds fields and changes defaults
    deployments = ("args", "best_of_n", "rl")  # decoders that can deploy it (the config switches each on or off)

    def __init__(self, hidden_size: int, settings: MethodSettings):
        super().__init__()
        self.hidden_size = hidden_size
        self.settings = settings
        self.users: dict[str, int] = {GENERIC_USER: 0}
        self.fitted_rows: int | None = None  # rows 1..fitted_rows-1 are the train users (set by fit)
        with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the caller's RNG
            torch.manual_seed(settings.seed)
            self.head = self.make_head()

    # --- to implement ---------------------------------------------------------------------
    Head: type[nn.Module] | None = None  # a head built from (hidden size, settings) alone; else override make_head

    def make_head(self) -> nn.Module:
        if self.Head is None:
            raise NotImplementedError(f"{type(self).__name__}: set Head or override make_head")
        return self.Head(self.hidden_size, self.settings)

    def shared_parameters(self) -> list[nn.Parameter]:
        tables = {id(t) for t in self.user_tables().values()}
        return [p for p in self.head.parameters() if id(p) not in tables]

    def user_tables(self) -> dict[str, nn.Parameter]:
        """Per-user parameters z_k: the head's tables its `per_user` names (their first dimension indexes users)."""
        return {name: getattr(self.head, name) for name in getattr(self.head, "per_user", ())}

    def new_user_row(self, name: str, table: torch.Tensor, user: str) -> torch.Tensor:
        """Initial parameters of `user` in table `name` (default zeros). Never a function of the row's
        position: a user's start, hence its adapted rewards, must not depend on who was adapted before."""
        return torch.zeros_like(table[0])

    def user_generator(self, user: str, salt: int = 0) -> torch.Generator:
        """A generator seeded by the method's seed and the user's NAME (not its row in the tables)."""
        digest = int(hashlib.sha1(f"{salt}:{user}".encode()).hexdigest()[:15], 16)
        return torch.Generator().manual_seed(self.settings.seed * 1_000_003 + digest)

    def train_user_rows(self, table: torch.Tensor) -> torch.Tensor:
        """The train users' rows of a user table (never adapted users: a new user's start
        must not depend on which users were adapted before it)."""
        return table[1 : self.fitted_rows] if self.fitted_rows else table[1:]

    def add_user(self, user: str) -> int:
        """Register a user; personalized heads get a new row in each user table."""
        if user in self.users:
            return self.users[user]
        self.users[user] = len(self.users)
        for name, table in self.user_tables().items():
            with torch.no_grad():
                grown = torch.cat([table.data, self.new_user_row(name, table.data, user)[None]])
            setattr(self.head, name, nn.Parameter(grown))
        return self.users[user]

    # --- rewards ----------------------------------------------------------------------------
    token_level = False  # GenARM: r_t is read from the state BEFORE token t and the token id itself

    def bind(self, lm) -> None:
        """Attach run-time parts of the backbone LM a head reads (GenARM: its LM head)."""

    def features(self, backbone, prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        """What the head reads for each response: by default the backbone state after each token."""
        return backbone.states(prompts, responses)

    @property
    def pooling(self) -> str:
        return self.head.pooling

    def user_ids(self, users: list[str]) -> torch.Tensor:
        return torch.tensor([self.users.get(u, 0) for u in users], dtype=torch.long)

    def home(self, fallback: torch.device) -> torch.device:
        """Where the head's parameters are (heads train on cached CPU features; a run deploys them on the
        policy's device, `TrainedReward`), `fallback` for a head without any."""
        first = next(self.head.parameters(), None)
        return fallback if first is None else first.device

    def token_rewards(self, states: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """r of every state, computed where the head is, returned where the states are."""
        home = self.home(states.device)
        return self.head.token_rewards(states.to(home), users.to(home)).to(states.device)

    def prefix_rewards(self, states: torch.Tensor, mask: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return base.prefix_rewards(self.token_rewards(states, users), mask, self.pooling)

    def step_rewards(self, states: torch.Tensor, mask: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """r(y_t | x, y<t) at every position (Eq. 5-6); see `base.step_rewards`."""
        return base.step_rewards(self.token_rewards(states, users), mask, self.pooling)

    def sequence_rewards(self, states: torch.Tensor, mask: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return base.sequence_rewards(self.token_rewards(states, users), mask, self.pooling)

    # --- learning ---------------------------------------------------------------------------
    def fit(self, backbone, train: PairData, val: PairData | None = None) -> TrainLog:
        for user in sorted(set(train.users) | set(val.users if val else [])):
            self.add_user(user)
        self.fitted_rows = len(self.users)
        precompute_features(self, backbone, train, val)
        s = self.settings
        groups = [{"params": self.shared_parameters(), "lr": s.head_lr, "weight_decay": s.weight_decay}]
        if self.user_tables():
            user_group = {"params": list(self.user_tables().values()), "lr": s.user_lr, "weight_decay": 0.0}
            groups = [user_group] + groups if self.alternate else groups + [user_group]
        if backbone.trainable:
            groups.append({"params": [p for p in backbone.lm.model.parameters() if p.requires_grad],
                           "lr": s.backbone_lr, "weight_decay": 0.0})
        schedule = TrainSchedule(s.epochs, s.batch_size, s.patience, s.seed, s.max_steps, self.alternate)
        return train_pairs(self, backbone, train, val, groups, schedule)

    def adapt(self, backbone, user: str, support: PairData) -> TrainLog | None:
        """z_k = A(D_support, θ): fit only this user's rows of the user tables (θ frozen)."""
        index = self.add_user(user)
        tables = list(self.user_tables().values())
        if not tables or len(support) == 0:
            return None
        shared = self.shared_parameters()
        for p in shared:
            p.requires_grad_(False)
        hooks = [t.register_hook(lambda grad, i=index: _only_row(grad, i)) for t in tables]
        try:
            s = self.settings
            groups = [{"params": tables, "lr": s.user_lr, "weight_decay": 0.0}]
            return train_pairs(self, backbone, support, None, groups,
                               TrainSchedule(s.adapt_epochs, s.batch_size, s.adapt_epochs, s.seed))
        finally:
            for hook in hooks:
                hook.remove()
            for p in shared:
                p.requires_grad_(True)

    loss = None  # a method may define loss(self, r_w, r_l, step); default Bradley-Terry
    alternate = False  # LoRE-Alt: alternate user-weight and shared steps

    def after_step(self) -> None:
        """Hook after each optimiser step (e.g. keep simplex weights valid)."""

    # --- persistence (safetensors + JSON, no pickle) ----------------------------------------
    def save(self, folder: str | Path) -> None:
        save_parameters(self, folder)

    @classmethod
    def load(cls, folder: str | Path) -> RewardMethod:
        return load_parameters(cls, folder)

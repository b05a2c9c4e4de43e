"""The one deployment interface: every way of deploying a policy for a user is a decoder in this package.

A deployment turns a batch of query examples into prompts (`prepare`), writes
an output for each (`generate`), and ranks each (chosen, rejected) pair with
its own scoring function (`score_pairs`: s_base Eq. 4, s_ICL Eq. 7, s_RGD
Eq. 5-6, or an implicit reward). The one evaluator (runner/evaluate.py) runs
any deployment through the run store; reports know deployments only by the
properties they declare here, never by name.

    persalign list          # the registered decoders, methods, data sets and metrics
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from persalign.core.records import PreferenceDataset, UserItem
from persalign.core.registry import DECODERS
from persalign.data.split import UserSplit


@dataclass(frozen=True)
class DeploymentProperties:
    """What a deployment is, as reports and the planner need to know it."""

    seed_dependent: bool = False  # outputs change with the seed (random demos, sampling, trained parts)
    reference_baseline: bool = False  # the reward-free policy every gain is measured against (zero-shot)
    uses_demonstrations: bool = False  # the user's own items go into the prompt (ICL)
    retrieves_demonstrations: bool = False  # ... chosen by similarity to the query (ICL-RAG)
    learns_from_pairs: bool = False  # a trained personalized component (a reward model or soft tokens)
    ranks_with_reward_model: bool = False  # an explicit RM ranks pairs and outputs (RM accuracy exists)
    reranks_samples: bool = False  # picks among sampled outputs (Best-of-N) instead of guiding decoding
    needs: str | None = None  # what the planner must provide: None, "reward_model" or "policy_method"
    compares_with_reference: bool = False  # reads the reference baseline's outputs (the win rate)
    tunes_policy: bool = False  # the policy's weights are tuned with the reward model (the RL leg)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class EvalContext:
    dataset: PreferenceDataset
    split: UserSplit
    embedder: object | None = None  # CachedEmbedder, for retrieval
    items: dict[str, UserItem] = field(default_factory=dict)
    comparisons: dict = field(default_factory=dict)  # id -> Comparison, filled on first use (pair-only data)

    def __post_init__(self):
        if not self.items:
            self.items = self.dataset.item_by_id()

    def demo_pool(self, user: str) -> list[UserItem]:
        """The user's support items; on pair-only data (TL;DR, PRISM, RewardBench), each support prompt
        with the answer the user chose (once per prompt: a turn's pairs share their chosen answer)."""
        support, seen = [], set()
        for i in self.split.support.get(user, []):
            item = self.items.get(i) or self._chosen_item(i)
            if (item.input, item.output) not in seen:
                seen.add((item.input, item.output))
                support.append(item)
        style_only = [item for item in self.dataset.profiles.get(user, []) if not item.input]
        return support + style_only

    def _chosen_item(self, comparison_id: str) -> UserItem:
        if not self.comparisons:
            self.comparisons = {c.id: c for c in self.dataset.comparisons}
        c = self.comparisons[comparison_id]
        return UserItem(c.id, c.user, c.prompt, c.chosen)


@dataclass
class PreparedBatch:
    """A batch of query examples with their prompts; `state` is the deployment's own (e.g. a shared prefill)."""

    examples: list  # runner.evaluate.Example
    prompts: list[list[int]]
    columns: list[dict]  # per-row values the deployment records (demo ids, prompt length)
    state: object = None

    @property
    def users(self) -> list[str]:
        return [ex.comparison.user for ex in self.examples]


@dataclass
class Generated:
    texts: list[str]
    tokens: list[int] | None = None  # generated token ids per output (the cost basis: seconds per token)
    scores: list[dict] | None = None  # generation metrics already known (Best-of-N's stored sample scores)
    columns: list[dict] | None = None  # per-row values beside the text (Best-of-N's curve points)
    # A pass shared with other cells (runner/args_pass.py): the wall seconds this call spent in it, and this
    # cell's share of such passes (by the work its rows took). The cell's stage is charged its share, not the
    # whole pass (which fell on whichever cell came first), so a deployment's measured seconds mean the same
    # whether it decoded alone or with others.
    pass_seconds_spent: float = 0.0
    pass_seconds_share: float = 0.0


@dataclass
class PairScores:
    """Each pair ranked by the deployment's policy score and, where it has one, by its reward model."""

    policy: tuple[np.ndarray, np.ndarray] | None = None  # s(chosen), s(rejected)
    reward: tuple[np.ndarray, np.ndarray] | None = None  # RM(chosen), RM(rejected)
    columns: list[dict] | None = None  # per-row values (ARGS: λ, the win over zero-shot)


class Deployment(Protocol):
    """What a registered decoder class builds for one cell (constructed as `cls(cell_context)`)."""

    label: str
    properties: DeploymentProperties
    extra_columns: tuple[str, ...]  # per-row scores summarised beside the generation metrics

    def begin(self) -> None: ...  # once per cell before its batches (ARGS chooses λ here)

    def prepare(self, examples: list) -> PreparedBatch: ...

    def generate(self, batch: PreparedBatch) -> Generated: ...

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores: ...

    def settings(self) -> dict: ...  # what the cell's metrics.json records about this deployment

    def finish(self, metrics: dict, rows: list[dict]) -> dict: ...  # add cell-level results (curves)


class DeploymentBase:
    """Defaults for the optional parts of the interface."""

    extra_columns: tuple[str, ...] = ()
    always_generates = False  # generate even where the data has no references (Best-of-N's RM-score curve)
    batches_by_user = False  # keep each user's queries in the same batches (ICL's per-user prefix cache)

    def begin(self) -> None:
        return None

    def finish(self, metrics: dict, rows: list[dict]) -> dict:
        return metrics

    def summary_line(self, metrics: dict) -> str:
        parts = [f"{name} {metrics[key]:.2f}" for key, name in SUMMARY_FIELDS if metrics.get(key) is not None]
        return ", ".join(parts)


class TrainedDeployment(DeploymentBase):
    """A deployment of a trained method: named after the method; its trained part comes in the cell context."""

    index_block = 0  # report order: block 0 right after the reward-free deployments, block 1 after that
    switch: str | None = None  # the config section whose `enabled` turns this deployment on (None: always on)

    @staticmethod
    def label_for_method(method_label: str) -> str:
        return method_label

    def __init__(self, ctx):
        self.ctx, self.trained, self.label = ctx, ctx.trained, ctx.cell.decoder
        self.formatter = ctx.policy.formatter
        # the run settings a deployment reads, received here once (not looked up four levels deep)
        self.generation, self.reward_mode = ctx.run.config.generation, ctx.run.config.reward.mode

    def training_settings(self) -> dict:
        """What every trained deployment records: the method, the reward mode and the training log."""
        return {"method": self.ctx.planned.method.name, "reward_mode": self.reward_mode,
                "training": {k: v for k, v in self.trained.log.items() if k != "history"}}


SUMMARY_FIELDS = (("rm_accuracy", "RM acc"), ("policy_accuracy", "policy acc"), ("rouge1", "ROUGE-1"),
                  ("win_rate", "win rate"))


def pair_responses(formatter, examples: list) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of each example's chosen and rejected responses."""
    return ([formatter.response_ids(ex.comparison.chosen) for ex in examples],
            [formatter.response_ids(ex.comparison.rejected) for ex in examples])


def example_rng(seed: int, example_id: str) -> np.random.Generator:
    """An RNG that depends only on (seed, example): results do not depend on batching or order."""
    digest = int(hashlib.sha1(example_id.encode("utf-8")).hexdigest()[:12], 16)
    return np.random.default_rng([seed, digest])


def properties_of(metrics: dict) -> dict:
    """A stored cell's deployment properties; runs written before they were stored: from the decoder's name."""
    if metrics.get("deployment"):
        return metrics["deployment"]
    name = (metrics.get("settings") or {}).get("decoder_name") or metrics.get("decoder_name")
    return DECODERS.get(name).properties.as_dict() if name in DECODERS else {}

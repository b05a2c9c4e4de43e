"""The typed run context: what a cell's deployment can read, in three layers.

RunContext (one per run: config, store, data, split, query examples, metrics),
PolicyContext (one per policy model: the model, its prompt formatter, the
log-prob memo, the Best-of-N sample set, the zero-shot outputs the win rate
compares with, trained components reused by every deployment of the policy),
CellContext (one per cell: the planned cell and the trained component it
needs). These replace long parameter lists and an untyped shared dict.

    python -c "from persalign.runner.context import RunContext; help(RunContext)"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from persalign.core.config import RunConfig
from persalign.decoders.base import EvalContext, properties_of
from persalign.engine.batching import plan_generation
from persalign.engine.cost import shape_of
from persalign.engine.decoding import generate_texts
from persalign.engine.work_meter import SharedMemo, WorkMeter
from persalign.runner.plan import PlannedCell
from persalign.runner.store import Cell, RunStore


@dataclass
class RunContext:
    config: RunConfig
    store: RunStore
    dataset: object  # PreferenceDataset
    split: object  # UserSplit
    examples: list  # runner.evaluate.Example: the adaptation users' query items
    eval_context: EvalContext
    metrics: list  # generation metrics (objects with .score, .columns, .settings)
    rouge: object  # the ROUGE metric the λ rule needs, even where ROUGE is not reported
    log: Callable[[str], None] = print
    judges: object = None  # runner.judging.Judges where the config names a judge

    @property
    def has_references(self) -> bool:
        """Only data with the users' own outputs has a reference to score a generation against."""
        return bool(self.dataset.completions)

    @property
    def generates(self) -> bool:
        """Deployments generate where a reference scores the output or a judge reads it."""
        return self.has_references or self.judges is not None

    def metric_settings(self) -> dict:
        return {k: v for m in self.metrics for k, v in m.settings().items()}


@dataclass
class PolicyContext:
    run: RunContext
    lm: object  # LoadedLM of the policy
    formatter: object  # PromptFormatter of the policy's tokenizer
    samples: object = None  # decoders.best_of_n_samples.SampleStore, when Best-of-N is on
    memo: SharedMemo = field(default_factory=SharedMemo)  # policy log-prob sums shared by every cell of this policy
    trained: dict = field(default_factory=dict)  # (method label, seed) -> trained component
    decoded: SharedMemo = field(default_factory=SharedMemo)  # the λ choice's greedy (λ = 0) batches, per scorer kind
    prefills: SharedMemo = field(default_factory=SharedMemo)  # the λ choice's validation batches prefilled once
    meter: WorkMeter = field(default_factory=WorkMeter)  # FLOPs of every forward of this policy's models
    args_pass: object = None  # runner.args_pass.ArgsPass: the ARGS cells decoded as rows of shared passes
    _zero_shot: dict | None = None
    _shape: object = None

    def __post_init__(self):
        for memo in (self.memo, self.decoded, self.prefills):  # their computations are shared work
            memo.meter = self.meter

    @property
    def shape(self):
        """The policy's shape, for counted costs (persalign.engine.cost)."""
        if self._shape is None:
            self._shape = shape_of(self.lm.model)
        return self._shape

    def zero_shot_outputs(self) -> dict[str, str]:
        """Zero-shot outputs for the win rate: the run's Zero-Shot cell where it has them, else generated."""
        if self._zero_shot is None:
            self._zero_shot = self._stored_zero_shot()
            missing = [ex for ex in self.run.examples if ex.id not in self._zero_shot]
            prompts = [self.formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history)
                       for ex in missing]
            generation = self.run.config.generation
            for batch in plan_generation(prompts, generation, self.lm.device):  # as the Zero-Shot cell batches
                with self.meter.shared():
                    texts = generate_texts(self.lm, [prompts[i] for i in batch], generation.max_new_tokens)
                self._zero_shot.update(zip([missing[i].id for i in batch], texts))
        return self._zero_shot

    def _stored_zero_shot(self) -> dict[str, str]:
        store, found = self.run.store, {}
        for meta in store.all_metrics():  # through the store's API: damaged cells are skipped there
            if meta["policy"] == self.lm.name and properties_of(meta).get("reference_baseline"):
                cell = Cell(meta["policy"], meta["decoder"], meta["seed"])
                found.update({row["id"]: row["generation"] for row in store.read_rows(cell)})
        return found


@dataclass
class CellContext:
    policy: PolicyContext
    planned: PlannedCell
    trained: object = None  # runner.trained.TrainedReward / TrainedPolicyMethod, as the cell's `needs` says

    @property
    def run(self) -> RunContext:
        return self.policy.run

    @property
    def cell(self) -> Cell:
        return self.planned.cell

    @property
    def seed(self) -> int:
        return self.planned.cell.seed

"""The planner's cells as a graph of tasks, for any backend that runs tasks in other processes (the local pool,
runner/pool_backend.py; Ray, runner/ray_backend.py); the driver's run store stays the one source of truth.

A backend gives `remote(fn, priority)` (an object whose `.remote(*args)` starts fn once every task ref among the
args has its result, and returns a ref), `wait_one(refs)` (a ref that has finished), `get(ref)` (its result, or
raises one of `errors`). Dependencies are task refs passed as arguments: a deployment waits for the trained model
it uses (trained once, whatever the number of policies and deployments using it), ARGS for the reference baseline's
outputs (its win rate), a Best-of-N cell for the samples the previous one of its policy × seed drew. With
`shared_args` (the local pool) a policy's ARGS cells are rows of one shared pass as in-process, in tasks: the λ
choice's validation decodes in `pass_parts` parts side by side, the choice, the query batches in `pass_parts`
parts, then each member (`submit_passes`); and every reward head after the first waits for the first, so the
frozen backbone's features are computed once.
On Ray the driver writes what each task returns, atomically, completion markers last (`RunStore.write_files`),
as results arrive; the local pool's workers (`backend.in_place`) write the run dir themselves, as in-process.
Either way an interrupted run loses no finished cell, and a re-run runs only what is missing.

    persalign run demo --workers 2
"""

from __future__ import annotations

from persalign.core.registry import METHODS
from persalign.runner.cells import is_pass_member, need_key
from persalign.runner.store import folder_name
from persalign.runner.tasks import (args_batches_files, args_lambdas_files, args_members_files, args_validation_files,
                                   cell_files, train_files)
from persalign.runner.trained import trained_dir


class Submitter:
    """Submits train and cell tasks with their dependencies; remembers what each pending ref is."""

    def __init__(self, backend, config, store, shared_args: bool = False, pass_parts: int = 1,
                 members_by_seed: bool = False):
        self.backend, self.config, self.store, self.pending = backend, config, store, {}
        # a backend whose workers share the run dir (the local pool) reads it there: nothing to copy
        self.files = (lambda relative: {}) if getattr(backend, "in_place", False) else store.read_files
        # the order a backend starts ready tasks in where it has a choice (the local pool): training, then the
        # shared pass, then cells in plan order, so the critical path (training → the pass) starts first
        self.train, self.cell = backend.remote(train_files, priority=0), backend.remote(cell_files, priority=2)
        self.heavy_train = backend.remote(train_files, priority=0, heavy=True)  # METHODS' `heavy_training`
        self.heavy_cell = backend.remote(cell_files, priority=2, heavy=True)  # `heavy_cell`
        self.args_pass = shared_args  # a policy's ARGS cells as one shared pass, in tasks (submit_passes)
        self.pass_parts = pass_parts  # tasks the pass's query batches are split over
        self.members_by_seed = members_by_seed  # the members' evaluation in one task per seed (else one task)
        self.models, self.baselines, self.samples, self.members = {}, {}, {}, {}
        self.first_features = None  # the first frozen reward head's train task: it fills the features cache

    def model(self, planned):
        """The trained model's files: from the store if complete, else the ref of the one train task."""
        key = need_key(planned)
        if key not in self.models:
            where = trained_dir(self.store, planned)
            if (where / "head.json").exists():
                self.models[key] = self.files(where.relative_to(self.store.root))
            else:
                fills = self._fills_features(planned)
                after = [self.first_features] if fills and self.first_features else []  # the cache filled first
                heavy = getattr(METHODS.get(planned.method.name), "heavy_training", False)
                train = self.heavy_train if heavy else self.train
                self.models[key] = train.remote(self.config, planned, str(self.store.root), *after)
                self.pending[self.models[key]] = ("train", [planned])
                if fills and self.first_features is None:
                    self.first_features = self.models[key]
        return self.models[key]

    def _fills_features(self, planned) -> bool:
        return (self.args_pass and planned.needs == "reward_model"
                and self.config.reward.mode == "frozen" and not getattr(METHODS.get(planned.method.name),
                                                                          "pretrained", False))

    def submit(self, planned) -> None:
        if self.args_pass and is_pass_member(planned, self.config) and not never_a_pass_row(planned):
            self.members.setdefault(planned.cell.policy, []).append(planned)
            self.model(planned)
            return
        inputs = [self.files(planned.cell.relpath())]  # rows of an interrupted run resume
        properties = planned.properties
        if planned.needs:
            inputs.append(self.model(planned))
        if properties.compares_with_reference and planned.cell.policy in self.baselines:
            inputs.append(self.baselines[planned.cell.policy])
        chain = (planned.cell.policy, planned.cell.seed)
        if properties.reranks_samples:
            inputs.append(self.samples.get(chain) or self.files("samples"))
        cell = self.heavy_cell if heavy_cell(planned, self.config) else self.cell
        ref = cell.remote(self.config, planned, str(self.store.root), *inputs)
        self.pending[ref] = ("cell", [planned])
        if properties.reference_baseline:
            self.baselines.setdefault(planned.cell.policy, ref)
        if properties.reranks_samples:
            self.samples[chain] = ref

    def submit_passes(self) -> None:
        """A policy's ARGS cells collected by `submit` (after every baseline is submitted), as its shared pass:
        `pass_parts` tasks decoding the λ choice's validation prompts for every member and λ at once, one task
        choosing every member's λ from them, `pass_parts` tasks decoding the query batches for every member at
        once, then the members through the evaluator on the stored rows (runner/tasks.py), one task per seed
        where `members_by_seed`, else one. Rows and passes are the in-process run's. A members task computes
        the scoring the members share (the policy's log-probs of the held-out responses) once for its members."""
        lambdas, batches, evaluate = (self.backend.remote(fn, priority=1) for fn in (
            args_lambdas_files, args_batches_files, args_members_files))
        # every member x nonzero λ a row of each validation pass: heavy, as the GenARM fit it ran beside (4.4 GiB)
        validation = self.backend.remote(args_validation_files, priority=1, heavy=True)
        root = str(self.store.root)
        for policy, members in self.members.items():
            inputs = [self.files(p.cell.relpath()) for p in members]
            inputs += [self.model(p) for p in members]
            inputs.append(self.files(f"args_pass/{folder_name(policy)}"))
            decoded = self._parts(validation, members, inputs)
            chosen = lambdas.remote(self.config, members, root, *inputs, *decoded)
            self.pending[chosen] = ("pass", members)
            parts = self._parts(batches, members, [chosen])
            baseline = [self.baselines[policy]] if policy in self.baselines and any(
                p.properties.compares_with_reference for p in members) else []
            for group in member_groups(members, self.members_by_seed):
                ref = evaluate.remote(self.config, (members, group), root, *parts, *baseline)
                self.pending[ref] = ("cell", group)
        self.members = {}

    def _parts(self, task, members: list, inputs: list) -> list:
        """`pass_parts` tasks of a policy's pass, each waiting for `inputs`."""
        parts = [task.remote(self.config, (members, part, self.pass_parts), str(self.store.root), *inputs)
                 for part in range(self.pass_parts)]
        self.pending.update({part: ("pass", members) for part in parts})
        return parts

    def baseline_from_store(self, planned) -> None:
        if planned.properties.reference_baseline:
            self.baselines.setdefault(planned.cell.policy, self.files(planned.cell.relpath()))


HEAVY_DEMONSTRATIONS = 128  # shots x generation.batch_size: the demonstrations in one batch's prompts


def heavy_cell(planned, config) -> bool:
    """A cell the pool keeps from running beside more than `heavy_at_once` - 1 other heavy tasks: one of a method
    with `heavy_cells` (GenARM: its λ grid and scoring are vocabulary-wide), or an ICL / ICL-RAG cell whose
    batches hold HEAVY_DEMONSTRATIONS demonstrations (8 x 16). In the full news study each held 1.6-2.4 GiB in
    its worker, and a GenARM cell beside an ICL-RAG 8-shot cell was the run's 4.7 GiB peak (2026-11-29;
    benchmarks/bench_pool.py --keep: memory.tsv beside tasks.tsv)."""
    if planned.method is not None:
        return getattr(METHODS.get(planned.method.name), "heavy_cells", False)
    shots = getattr(planned.decoder_config, "shots", 0) or 0
    return shots * config.generation.batch_size >= HEAVY_DEMONSTRATIONS


def never_a_pass_row(planned) -> bool:
    """An ARGS cell whose RM the shared pass never takes as a row (the method's kind: decoders/args_shared.
    reads_the_states; GenARM's token-level RM): a cell task of its own, not waiting for the pass."""
    from persalign.decoders.args_shared import reads_the_states

    return not reads_the_states(METHODS.get(planned.method.name))


def member_groups(members: list, by_seed: bool) -> list[list]:
    """The shared pass's members in evaluation tasks: one per seed, in plan order, or all in one."""
    if not by_seed:
        return [members]
    seeds: dict[int, list] = {}
    for planned in members:
        seeds.setdefault(planned.cell.seed, []).append(planned)
    return list(seeds.values())


def submit_all(submitter: Submitter, cells: list, todo: list) -> None:
    todo_cells = {planned.cell for planned in todo}
    for planned in todo:  # every training first: the chain training → deployment is the longest
        if planned.needs:
            submitter.model(planned)
    for planned in cells:
        if planned.cell in todo_cells:
            submitter.submit(planned)
        else:
            submitter.baseline_from_store(planned)
    if submitter.args_pass:
        submitter.submit_passes()


def wait_all(submitter: Submitter, progress, log, stop_at_first: bool = False) -> list[str]:
    """Write each result as it arrives; the failures, one line each. `stop_at_first`: raise the first task's own
    error instead, as the in-process run stops at its first (the local pool)."""
    backend, failures = submitter.backend, []
    while submitter.pending:
        ref = backend.wait_one(list(submitter.pending))
        kind, planned = submitter.pending.pop(ref)
        first = planned[0]
        what = {"train": first.method_label, "pass": f"the ARGS pass ({len(planned)} cells)"}.get(
            kind, ", ".join(p.cell.decoder for p in planned))
        try:
            submitter.store.write_files(backend.get(ref))
        except backend.errors as error:
            if stop_at_first:
                raise
            failures.append(f"{kind} {what} | {first.cell.policy} | seed {first.cell.seed}: "
                            f"{str(error).strip().splitlines()[-1][:300]}")
            log(f"FAILED {failures[-1]}")
            continue
        for done in planned if kind == "cell" else []:
            log(f"{done.cell.decoder} | {done.cell.policy} | seed {done.cell.seed}: done")
            progress.tick(done.cell.decoder)
    return failures

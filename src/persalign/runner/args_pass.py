"""The shared ARGS pass of one policy: every frozen-backbone reward head decoded as rows of one pass (issue #42).

The ARGS cells of a policy whose reward model is a sequence-level head over the policy's own frozen
model (decoders/args_shared.shares_the_policy) are its MEMBERS. When the first member needs its λ,
every member's λ-choice validation decodes (each nonzero λ of the grid, every method and seed) run
as rows of shared passes, and each member's λ is chosen from its own rows and written to its cell
folder (lambda.json) at once; each group of validation prompts is stored (RUN_DIR/args_pass/POLICY/
validation-HASH.json) as it is decoded, so tasks can decode the groups side by side (runner/tasks.py) and an
interrupted choice keeps them. When the first member generates a batch of query prompts, every member
with λ ≠ 0 decodes that batch in the same passes; the outputs of all members are written to
RUN_DIR/args_pass/POLICY/generation-HASH.json before any is used, so a resumed run reads exactly what
the interrupted one computed. Near-ties (decoders/args_shared.py) are counted per row.

Costs stay honest: each row records the candidate forwards it needs deployed alone and its share of
those the pass did; the counted FLOPs of a cell (cost.py) are its work alone. The pass's metered work
is shared work (work_meter.py). A pass's wall seconds, and the λ choice's shared FLOPs, are charged to the
members by the candidate forwards their rows took, so each deployment's measured seconds stay comparable.
A pass holds at most batch_size × the number of nonzero λ rows (`prompts_per_pass`), as the λ grid did.

    persalign run demo          # args.shared_pass: true (default); false decodes each cell alone
"""

from __future__ import annotations

import hashlib
import json
import time

from persalign.core.files import DamagedFileError, fields, read_json, set_aside, write_atomic
from persalign.decoders.args import alone_forwards, lambda_path, read_choice, timed_choice
from persalign.decoders.args_lambda import rule_of, validation_pairs
from persalign.decoders.args_shared import HeadRow, shared_args_decode, shares_the_policy
from persalign.engine.batching import plan_generation
from persalign.runner.context import CellContext
from persalign.runner.store import folder_name

PASS_COLUMNS = ("ids", "needed", "done", "near_ties", "seconds")  # per head, per prompt
FORWARD_COLUMNS = (("candidate_forwards", "needed"), ("candidate_forwards_done", "done"), ("near_ties", "near_ties"))


def pass_problem(outputs: dict, rows: int) -> str | None:
    """Why a stored batch of the pass cannot be used (None: it can)."""
    for key, member in outputs.items():
        if not isinstance(member, dict):
            return f"member {key!r} is not an object"
        for column in ("ids", "done", "near_ties"):
            values = member.get(column)
            if not isinstance(values, list) or len(values) != rows:
                return f"member {key!r}: {column!r} is not a list of {rows} (one per prompt)"
        if not all(isinstance(ids, list) and all(isinstance(t, int) for t in ids) for ids in member["ids"]):
            return f"member {key!r}: 'ids' holds something other than lists of token ids"
    return None


def member_key(cell) -> str:
    return f"{cell.decoder}/seed-{cell.seed}"


def guided_lambdas(config) -> list[float]:
    """The λ grid's nonzero values, each a row of the pass per member (λ = 0 is greedy: not a row)."""
    return [lam for lam in dict.fromkeys(config.args.lambdas) if lam != 0]


def prompts_per_pass(config, heads: int) -> int:
    """Prompts in one pass of `heads` heads: a pass holds at most batch_size × the nonzero λ count rows, and
    at least one prompt."""
    return max(1, config.generation.batch_size * max(1, len(guided_lambdas(config))) // heads)


def head_name(key: str, lam: float) -> str:
    """A validation head's name in a stored group: the member and its λ."""
    return f"{key}@{lam!r}"


def validation_problem(stored: dict, rows: int) -> str | None:
    """Why a stored group of the λ choice's validation decodes cannot be used (None: it can)."""
    flops = stored.get("flops")
    if isinstance(flops, bool) or not isinstance(flops, (int, float)):
        return "'flops' is not a number"
    if not isinstance(stored.get("heads"), dict):
        return "'heads' is not an object"
    return pass_problem(stored["heads"], rows)


def _fill(slot: dict, group: list[int], columns: dict) -> None:
    """A head's columns over all prompts, filled at `group` from one pass's columns (one entry per prompt)."""
    for column, values in columns.items():
        for i, value in zip(group, values):
            slot[column][i] = value


def seconds_by_share(seconds: float, shares: list[float]) -> list[float]:
    """A shared pass's seconds split over its rows in proportion to the candidate forwards each took (a row
    on its own path pays its forwards, rows on one path split theirs); equally where none was taken."""
    total = sum(shares)
    return [seconds * share / total if total else seconds / len(shares) for share in shares]


class ArgsPass:
    """The members of one policy's shared pass; decodes their λ choices and their query batches together."""

    def __init__(self, policy_ctx, planned_cells: list, trained_of):
        self.policy, self.trained_of = policy_ctx, trained_of
        self.planned = {p.cell: p for p in planned_cells}
        self._members: dict | None = None  # cell -> trained, once known
        self._outputs: dict[str, dict] = {}  # batch hash -> member key -> decoded rows
        self._lambdas: dict | None = None  # cell -> chosen λ, once every member has one
        self.folder = policy_ctx.run.store.root / "args_pass" / folder_name(policy_ctx.lm.name)

    def takes(self, cell, trained) -> bool:
        return cell in self.planned and shares_the_policy(self.policy.lm, trained)

    def members(self) -> dict:
        """Every member's trained head (trained, or loaded from the run dir, on first need)."""
        if self._members is None:
            trained = {cell: self.trained_of(planned) for cell, planned in self.planned.items()}
            self._members = {cell: t for cell, t in trained.items() if shares_the_policy(self.policy.lm, t)}
        return self._members

    def context(self, cell) -> CellContext:
        return CellContext(self.policy, self.planned[cell], self.members()[cell])

    def unchosen(self) -> list:
        """The members without a stored λ choice."""
        return [cell for cell in self.members() if read_choice(lambda_path(self.context(cell))) is None]

    def choose_lambdas(self) -> None:
        """λ of every member without a stored choice; the validation decodes shared where the rule decodes, each
        group of prompts read from the pass's folder where a task decoded it already (`decode_validation`)."""
        todo = self.unchosen()
        if not todo:
            return
        decoded, forwards, shared_s, shared_flops = {}, {}, 0.0, 0.0
        if rule_of(self.policy.run) == "harmonic":
            decoded, forwards, shared_s, shared_flops = self._decode_grids(todo)
        shares = seconds_by_share(1.0, [forwards.get(cell, {}).get("candidate_forwards_done", 0.0) for cell in todo])
        for cell, share in zip(todo, shares):
            ctx = self.context(cell)
            choice = timed_choice(ctx, ctx.trained, decoded.get(cell))
            # the shared decodes are charged to each member by the candidate forwards its rows took
            choice["seconds"] += shared_s * share
            choice["shared_flops"] += shared_flops * share
            choice.update(forwards.get(cell, {}), shared_pass_members=len(todo))
            write_atomic(lambda_path(ctx), json.dumps(choice, indent=2))

    def decode_validation(self, part: int = 0, parts: int = 1) -> None:
        """The λ choice's validation decodes of prompt groups `part`, `part + parts`, ..., each stored in the
        pass's folder (runner/tasks.args_validation_files): the rows and passes `choose_lambdas` decodes."""
        todo = self.unchosen()
        if todo and rule_of(self.policy.run) == "harmonic":
            val, heads = self._validation(todo)
            for group in self._groups(heads, val.prompts)[part::parts]:
                self._stored_validation(heads, val, group)

    def _validation(self, todo: list) -> tuple:
        run, config = self.policy.run, self.policy.run.config
        val, _ = validation_pairs(run.dataset, run.split, self.policy.formatter, config.args.validation_size)
        return val, [(member_key(cell), self.members()[cell].method, lam) for cell in todo
                     for lam in guided_lambdas(config)]

    def _decode_grids(self, todo: list) -> tuple[dict, dict, float, float]:
        """Each member's validation outputs at each nonzero λ, its candidate forwards needed / done, and the
        seconds and the metered FLOPs (shared work) of the passes."""
        val, heads = self._validation(todo)
        out, flops = self._empty(heads, len(val.prompts)), 0.0
        for group in self._groups(heads, val.prompts):
            stored = self._stored_validation(heads, val, group)
            flops += stored["flops"]
            for key, _, lam in heads:
                _fill(out[(key, lam)], group, stored["heads"][head_name(key, lam)])
        weights = list(dict.fromkeys(lam for _, _, lam in heads))
        decoded = {cell: {lam: out[(member_key(cell), lam)]["ids"] for lam in weights} for cell in todo}
        forwards = {cell: {name: sum(sum(out[(member_key(cell), lam)][column]) for lam in weights)
                           for name, column in FORWARD_COLUMNS} for cell in todo}
        return decoded, forwards, sum(sum(slot["seconds"]) for slot in out.values()), flops

    def _stored_validation(self, heads: list[tuple], val, group: list[int]) -> dict:
        """One group of validation prompts decoded for every head in one pass, stored before use with the FLOPs
        it took ({"flops": ..., "heads": {KEY@λ: columns}}), or read where a task stored it."""
        prompts, users = [val.prompts[i] for i in group], [val.users[i] for i in group]
        digest = hashlib.sha256(json.dumps([prompts, users, [[key, lam] for key, _, lam in heads]]).encode())
        path = self.folder / f"validation-{digest.hexdigest()[:20]}.json"
        stored = self._read(path, len(group), validation_problem)
        if not stored:
            work: dict = {}
            with self.policy.meter.measure(work, "flops"):
                rows = self._decode_group(heads, prompts, users, list(range(len(group))))
            stored = {"flops": work.get("flops", 0.0) + work.get("flops_shared", 0.0),
                      "heads": {head_name(key, lam): columns for (key, lam), columns in rows.items()}}
            write_atomic(path, json.dumps(stored))
        return stored

    def _empty(self, heads: list[tuple], rows: int) -> dict:
        return {(key, lam): {column: [None if column == "ids" else 0] * rows for column in PASS_COLUMNS}
                for key, _, lam in heads}

    def _groups(self, heads: list[tuple], prompts: list[list[int]]) -> list[list[int]]:
        """The prompts' groups, each decoded for every head in one pass (`prompts_per_pass`; none without a
        head: a grid of λ = 0 only guides nothing)."""
        if not heads:
            return []
        config = self.policy.run.config
        return [list(group) for group in plan_generation(prompts, config.generation, self.policy.lm.device,
                                                         max_items=prompts_per_pass(config, len(heads)))]

    def _decode(self, heads: list[tuple], prompts: list[list[int]], users: list[str]) -> dict:
        """Every (key, method, λ) head on every prompt in the passes of `_groups`; per head: ids, needed, done,
        near_ties, seconds in the prompts' order."""
        out = self._empty(heads, len(prompts))
        for group in self._groups(heads, prompts):
            for head, columns in self._decode_group(heads, prompts, users, group).items():
                _fill(out[head], group, columns)
        return out

    def _decode_group(self, heads: list[tuple], prompts: list[list[int]], users: list[str], group: list[int]) -> dict:
        """One pass: every head on the prompts of `group`; (key, λ) -> its columns, one entry per prompt of
        `group`, each row charged its share of the pass's seconds."""
        config = self.policy.run.config
        rows = [(key, HeadRow(tuple(prompts[i]), method, users[i], lam)) for i in group for key, method, lam in heads]
        started = time.perf_counter()
        with self.policy.meter.shared():
            result = shared_args_decode(self.policy.lm, [r for _, r in rows], config.generation.max_new_tokens,
                                        config.args.top_k)
        seconds = seconds_by_share(time.perf_counter() - started, result.done)
        out = {(key, lam): {column: [] for column in PASS_COLUMNS} for key, _, lam in heads}
        for n, (key, row) in enumerate(rows):
            values = (result.ids[n], result.needed[n], result.done[n], result.near_ties[n], seconds[n])
            for column, value in zip(PASS_COLUMNS, values):
                out[(key, row.lam)][column].append(value)
        return out

    def generation(self, cell, batch) -> tuple[list[list[int]], list[dict], dict]:
        """This member's ARGS outputs of a batch of query prompts, each row's candidate forwards, and the
        seconds this call spent decoding for every member and this member's share of them (Generated's
        pass_seconds_spent / pass_seconds_share)."""
        outputs, spent = self.stored_batch(batch)
        rows = outputs[member_key(cell)]
        max_new = self.policy.run.config.generation.max_new_tokens
        forwards = [alone_forwards(ids, max_new, done, ties) for ids, done, ties
                    in zip(rows["ids"], rows["done"], rows["near_ties"])]
        return rows["ids"], forwards, {"pass_seconds_spent": spent,
                                       "pass_seconds_share": sum(rows.get("seconds", []))}

    def stored_batch(self, batch) -> tuple[dict, float]:
        """Every member's outputs of a batch of query prompts, decoded together where a member with λ ≠ 0 is
        missing and stored before any is used, and the seconds this call spent decoding. Whichever member (or
        task: runner/tasks.args_batches_files) comes first, the batch's rows and passes are the same."""
        digest = hashlib.sha256(json.dumps([batch.prompts, batch.users]).encode()).hexdigest()[:20]
        path = self.folder / f"generation-{digest}.json"
        outputs, spent = self._outputs.get(digest) or self._read(path, len(batch.prompts)), 0.0
        if any(member_key(cell) not in outputs for cell, lam in self.lambdas().items() if lam != 0):
            started = time.perf_counter()  # after the λ choice (its own stage)
            outputs = self._decode_batch(batch)
            spent = time.perf_counter() - started
            write_atomic(path, json.dumps(outputs))
        self._outputs[digest] = outputs
        return outputs, spent

    def _read(self, path, rows: int, problem_of=pass_problem) -> dict:
        """A stored batch (or validation group) of the pass, or {} (decoded again) where it is absent or damaged:
        unreadable, a member without its columns, or columns not one entry per prompt (a KeyError / IndexError
        before)."""
        if not path.exists():
            return {}
        try:
            outputs = read_json(path, fields({}))
            problem = problem_of(outputs, rows)
        except DamagedFileError as error:
            problem = error.problem
        if problem is None:
            return outputs
        set_aside(path, problem, "its rows are decoded again")
        return {}

    def lambdas(self) -> dict:
        """Every member's chosen λ, chosen (together) where missing, read once per run."""
        if self._lambdas is None:
            self.choose_lambdas()
            self._lambdas = {cell: read_choice(lambda_path(self.context(cell)))["lambda"] for cell in self.members()}
        return self._lambdas

    def _decode_batch(self, batch) -> dict:
        # λ = 0 decodes greedily, with no reward: not a row of the pass
        heads = [(member_key(cell), self.members()[cell].method, lam)
                 for cell, lam in self.lambdas().items() if lam != 0]
        out = self._decode(heads, batch.prompts, batch.users)
        return {key: out[(key, lam)] for key, _, lam in heads}

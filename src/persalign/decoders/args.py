"""ARGS deployment of a trained reward model (paper Eq. 1; policy accuracy Eq. 5-6; win rate Table 5).

Per cell (method × policy × seed) λ is chosen once (decoders/args_lambda.py,
appendix F.2) and kept in the cell folder as lambda.json. A chosen λ of 0
switches the reward off: the cell decodes greedily and counts greedy's work. Per batch of query
examples: ARGS generation with the user's reward, policy accuracy with
s_RGD = Σ log π + λ Σ r_t, RM accuracy (Eq. 2), and the win rate of the ARGS
output over the zero-shot output under the method's own RM.

    persalign run configs/news_category.yaml methods='[{name: global_rm}]'
"""

from __future__ import annotations

import json
import time

from persalign.core.files import DamagedFileError, fields, read_json, set_aside, write_atomic
from persalign.core.registry import register_decoder
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide
from persalign.decoders.args_graph import GraphedArgs, args_decode_graphed_where_possible
from persalign.decoders.args_lambda import choose_lambda
from persalign.decoders.base import (DeploymentProperties, Generated, PairScores, PreparedBatch, TrainedDeployment,
                                     pair_responses)
from persalign.engine.cost import args_work, greedy_work, reward_shapes, text_args_work
from persalign.engine.decoding import clean_generation, decode_from, greedy, prefill
from persalign.engine.work_meter import shared_work
from persalign.metrics.ranking import pair_outcome
from persalign.rewards.policy_scoring import logprob_sums, reward_sums, s_rgd, whole_response_rewards


def plain_prompts(formatter, examples: list) -> PreparedBatch:
    """The query prompts with no demonstrations (the user is in the reward model, not the prompt)."""
    fitted = [formatter.fit(ex.comparison.prompt, history=ex.comparison.history) for ex in examples]
    return PreparedBatch(examples, [ids for ids, _, _ in fitted], [{"input_cut": cut} for _, _, cut in fitted])


@register_decoder("args")
class ArgsDeployment(TrainedDeployment):
    """The policy decoded with ARGS under the user's reward; pairs ranked by s_RGD."""

    switch = "args"

    properties = DeploymentProperties(seed_dependent=True, learns_from_pairs=True, ranks_with_reward_model=True,
                                      needs="reward_model", compares_with_reference=True)
    def __init__(self, ctx):
        super().__init__(ctx)
        self.lm, self.args = ctx.policy.lm, ctx.run.config.args
        self.choice: dict = {}
        # args.cuda_graph: the cell's captured steps, kept across its batches
        self.graphs = GraphedArgs(ctx.policy.meter) if self.args.cuda_graph else None

    def begin(self) -> None:
        path = lambda_path(self.ctx)
        self.choice = read_choice(path)
        if self.choice is None and self.shared_pass is not None:
            self.shared_pass.choose_lambdas()  # every member's λ, their validation decodes in one pass
            self.choice = read_choice(path)
        if self.choice is None:
            self.choice = timed_choice(self.ctx, self.trained)
            write_atomic(path, json.dumps(self.choice, indent=2))

    @property
    def shared_pass(self):
        """The policy's shared ARGS pass (runner/args_pass.py) where this cell is one of its rows, else None."""
        shared = getattr(self.ctx.policy, "args_pass", None)
        return shared if shared is not None and shared.takes(self.ctx.cell, self.trained) else None

    @property
    def lam(self) -> float:
        return self.choice["lambda"]

    def prepare(self, examples: list) -> PreparedBatch:
        return plain_prompts(self.formatter, examples)

    def generate(self, batch: PreparedBatch) -> Generated:
        if self.lam == 0:
            return self._greedy(batch)
        max_new, stats, seconds = self.generation.max_new_tokens, {}, {}
        if self.shared_pass is not None:
            ids, forwards, seconds = self.shared_pass.generation(self.ctx.cell, batch)
        else:
            guide = RewardGuide(self.trained.backbone.lm, self.trained.method, batch.users, self.lam, self.args.top_k)
            ids = args_decode_graphed_where_possible(self.graphs, self.lm, guide, batch.prompts, max_new,
                                                     DecodeRecord(stats))
        shapes, token_level = reward_shapes(self.ctx.policy, self.trained), self.trained.method.token_level
        if self.shared_pass is None:
            forwards = [alone_forwards(row, max_new, tree=not token_level) for row in ids]
        if stats.get("reward_texts") is not None:  # a text-level RM counted what it read, row by row
            work = [text_args_work(shapes, len(p), len(row), max_new, read).columns()
                    for p, row, read in zip(batch.prompts, ids, stats["reward_texts"])]
        else:
            work = [args_work(shapes, len(p), len(row), max_new, self.args.top_k, token_level).columns()
                    for p, row in zip(batch.prompts, ids)]
        return Generated([clean_generation(self.lm.tokenizer, row) for row in ids], [len(row) for row in ids],
                         columns=[{**w, **f} for w, f in zip(work, forwards)], **seconds)

    def _greedy(self, batch: PreparedBatch) -> Generated:
        """λ = 0 switches the reward off: ARGS's choice is the argmax of log π, so it decodes as greedy does
        (one engine) and counts greedy's work; no candidate needs a reward. A batch is decoded once per
        policy and reused by every cell at λ = 0 (shared work)."""
        max_new, memo = self.generation.max_new_tokens, self.ctx.policy.decoded
        key = ("greedy", max_new, tuple(map(tuple, batch.prompts)))  # the whole batch: the same computation
        if key not in memo:  # every method that chose λ = 0 writes these same outputs: decoded once (issue #42)
            with shared_work(getattr(memo, "meter", None)):
                memo[key] = decode_from(self.lm, prefill(self.lm, batch.prompts), greedy, max_new)
        ids = [list(row) for row in memo[key]]
        shape = self.ctx.policy.shape
        return Generated([clean_generation(self.lm.tokenizer, row) for row in ids], [len(row) for row in ids],
                         columns=[greedy_work(shape, len(p), len(row), max_new).columns()
                                  for p, row in zip(batch.prompts, ids)])

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores:
        users, prompts, n = batch.users, batch.prompts, len(batch.examples)
        method, backbone = self.trained.method, self.trained.backbone
        chosen, rejected = pair_responses(self.formatter, batch.examples)
        batch_size = self.generation.batch_size
        lp = logprob_sums(self.lm, prompts + prompts, chosen + rejected, batch_size, self.ctx.policy.memo,
                          self.generation.token_budget)
        seq, step_sum = reward_sums(method, backbone, users * 2, prompts * 2, chosen + rejected)
        s = s_rgd(lp, step_sum, self.lam)
        columns = [{"lambda": self.lam} for _ in range(n)]
        if generated is not None:
            self._add_win_rate(batch, generated, columns)
        return PairScores(policy=(s[:n], s[n:]), reward=(seq[:n], seq[n:]), columns=columns)

    def _add_win_rate(self, batch: PreparedBatch, generated: Generated, columns: list[dict]) -> None:
        add_own_rm_win_rate(self.ctx, self.trained, batch, generated.texts, columns)

    def settings(self) -> dict:
        ties = getattr(self.trained.method, "truncation_ties", None)  # a text-level RM that cut its inputs
        return {"lambda": self.lam, "lambda_rule": self.choice["rule"], "lambda_s": self.choice.get("seconds", 0.0),
                "lambda_flops": self.choice.get("flops"), "lambda_shared_flops": self.choice.get("shared_flops"),
                "top_k": self.args.top_k,
                **({"truncation_ties": ties} if ties else {}), **self.training_settings()}

    def finish(self, metrics: dict, rows: list[dict]) -> dict:
        """ARGS's candidate forwards per stage: needed deployed alone, done (this cell's share of the shared
        pass), and the near-tie steps the pass counted (issue #42)."""
        generation = {key: sum(row.get(f"args_{column}", 0) for row in rows) for key, column in FORWARD_COLUMNS}
        choice = {key: self.choice.get(column) for key, column in FORWARD_COLUMNS if column in self.choice}
        metrics["args_candidate_forwards"] = {"generation": generation, **({"lambda_choice": choice} if choice else {})}
        return metrics

    def summary_line(self, metrics: dict) -> str:
        return f"λ={self.lam} ({self.choice['rule']}), " + super().summary_line(metrics)


FORWARD_COLUMNS = (("needed", "candidate_forwards"), ("done", "candidate_forwards_done"), ("near_ties", "near_ties"))


def lambda_path(ctx):
    return ctx.run.store.cell_dir(ctx.cell) / "lambda.json"


def read_choice(path) -> dict | None:
    """A cell's stored λ choice; None where there is none (or it was damaged and set aside)."""
    if not path.exists():
        return None
    try:
        return read_json(path, fields({"lambda": (int, float)}))
    except DamagedFileError as error:
        set_aside(path, error.problem, "λ is chosen again")
        return None


def timed_choice(ctx, trained, decoded: dict | None = None) -> dict:
    """`choose_lambda` with its seconds and its metered work (own and shared) recorded beside the choice."""
    started, work = time.perf_counter(), {}
    with ctx.policy.meter.measure(work, "flops"):  # the λ choice's decodes and scoring, metered
        choice = choose_lambda(ctx, trained, decoded)
    choice.update(seconds=time.perf_counter() - started, flops=work["flops"],
                  shared_flops=work.get("flops_shared", 0.0))
    return choice


def alone_forwards(ids: list[int], max_new: int, share: float | None = None, near_ties: int = 0,
                   tree: bool = True) -> dict:
    """A row's ARGS candidate forwards: needed alone (one per step: each token and the step that ended the row;
    none for a token-level RM, which scores candidates without one) and done (its share of the shared pass's;
    alone, all of them); near-tie steps the shared pass counted."""
    needed = min(len(ids) + 1, max_new) if tree else 0
    return {"args_candidate_forwards": needed, "args_candidate_forwards_done": needed if share is None else share,
            "args_near_ties": near_ties}


def add_own_rm_win_rate(ctx, trained, batch: PreparedBatch, texts: list[str], columns: list[dict]) -> None:
    """The RM's own verdict: does it prefer the deployment's output to zero-shot's on the same prompt? (ARGS, RL)"""
    zero_shot_outputs = ctx.policy.zero_shot_outputs()
    zero_shot = [zero_shot_outputs[ex.id] for ex in batch.examples]
    responses = [ctx.policy.formatter.response_ids(t) for t in texts + zero_shot]
    n = len(batch.examples)
    scores = whole_response_rewards(trained.method, trained.backbone, batch.users * 2, batch.prompts * 2, responses)
    for i in range(n):
        win = pair_outcome(scores[i], scores[n + i])
        columns[i].update({"zero_shot_generation": zero_shot[i], "rm_generation": float(scores[i]),
                           "rm_zero_shot": float(scores[n + i]), "win": win["correct"], "win_tie": win["tie"]})

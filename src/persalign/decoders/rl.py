"""`METHOD (RL)`: the policy tuned by reinforcement learning with the method's reward model, then decoded
greedily (issue #41; Personalized RewardBench's PPO leg, here GRPO through TRL, decoders/rl_training.py).

One LoRA adapter per adaptation user, tuned on that user's support prompts with the user's personalized
reward, or one adapter for every user where the reward model is global (tuned on all their support
prompts). Steps are capped (`rl.steps`: this is a CPU run; the cell's settings state the cap). The tuned
policy is then deployed like zero-shot: greedy outputs scored against the user's text and by the judge,
pairs ranked by its s_base (Eq. 4, the tuned policy's mean log-likelihood), the RM's accuracy on the same
pairs, and the RM's own win rate over zero-shot. The tuning's counted work per new user goes into the
verdict's adaptation column beside the RM's own adaptation: per-user RL as a measured number.

    persalign run demo rl.enabled=true args.enabled=false 'methods=[{name: global_rm}, {name: lore}]' rl.steps=4
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time

import numpy as np
from safetensors.torch import save_file

from persalign.core.files import DamagedFileError, read_tensors, set_aside, short, write_atomic
from persalign.core.registry import register_decoder
from persalign.decoders.args import add_own_rm_win_rate, plain_prompts
from persalign.decoders.base import (DeploymentProperties, Generated, PairScores, PreparedBatch, TrainedDeployment,
                                     pair_responses)
from persalign.decoders.rl_training import CountedReward, adapter_mismatch, adapter_shapes, tune, tuned_model
from persalign.engine.cost import greedy_work, reward_shapes
from persalign.engine.decoding import clean_generation, decode_from, greedy, prefill
from persalign.engine.scoring import logprobs_from_prefill, mean_logprob
from persalign.rewards.policy_scoring import whole_response_rewards

EVERY_USER = "every-user"  # the one adapter of a global reward model


@register_decoder("rl")
class RLDeployment(TrainedDeployment):
    """The policy tuned by GRPO (TRL, LoRA) with the user's reward model, decoded greedily."""

    switch = "rl"
    properties = DeploymentProperties(seed_dependent=True, learns_from_pairs=True, ranks_with_reward_model=True,
                                      needs="reward_model", compares_with_reference=True, tunes_policy=True)
    index_block = 2  # report order: after ARGS and Best-of-N
    batches_by_user = True  # a user's queries share their adapter

    @staticmethod
    def label_for_method(method_label: str) -> str:
        return f"{method_label} (RL)"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.options, self.lm = ctx.run.config.rl, ctx.policy.lm
        self.tunings: dict = {}
        self.merged: tuple[str, object] | None = None  # the adapter merged last (batches keep a user together)
        self.expected: dict | None = None  # name -> shape of this policy's adapter tensors (files read back: checked)

    def adapter_of(self, user: str) -> str:
        return user if self.trained.method.personalized else EVERY_USER

    def begin(self) -> None:
        users = sorted({ex.comparison.user for ex in self.ctx.run.examples})
        groups: dict[str, list[str]] = {}
        for user in users:
            groups.setdefault(self.adapter_of(user), []).append(user)
        for key, members in groups.items():
            self.tunings[key] = self._load_or_tune(key, members)

    def _load_or_tune(self, key: str, members: list[str]) -> dict:
        folder = self.ctx.run.store.cell_dir(self.ctx.cell) / "rl"
        name = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]
        weights, log = folder / f"{name}.safetensors", folder / f"{name}.json"
        if weights.exists() and log.exists():  # the log is written last: both present means complete
            stored = self._stored(weights, log)
            if stored is not None:
                return stored
        reward, users = self._reward(members)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:  # TRL's output_dir: nothing of it is kept
            tuning = tune(self.lm, reward, users, self.options, self.ctx.seed, scratch)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tuning.state, str(weights))
        info = {"user": key, "prompts": len(users), "flops": tuning.flops, "completions": tuning.completions,
                "rewards": tuning.rewards, "seconds": time.perf_counter() - started}
        write_atomic(log, json.dumps(info))
        return {**info, "state": tuning.state}

    def _stored(self, weights, log) -> dict | None:
        """The stored tuning, or None where its files are damaged or hold no adapter of this policy (both set
        aside in one line; the adapter is tuned again)."""
        try:
            info, state = json.loads(log.read_text(encoding="utf-8")), read_tensors(weights)
            problem = None if isinstance(info, dict) else "its log is not a JSON object"
            if problem is None:
                self.expected = self.expected or adapter_shapes(self.lm, self.options)
                problem = adapter_mismatch(state, self.expected)
        except (OSError, UnicodeDecodeError, ValueError, DamagedFileError) as error:
            damaged = isinstance(error, DamagedFileError)
            problem = error.problem if damaged else f"{type(error).__name__}: {short(error)}"
        if problem is None:
            return {**info, "state": state}
        set_aside(weights, problem, "the adapter is tuned again")
        set_aside(log, problem, "the adapter is tuned again", damaged=False)
        return None

    def _reward(self, members: list[str]) -> tuple[CountedReward, list[str]]:
        """The reward function over the members' support prompts (text as TRL reads it -> the policy's ids)."""
        comparisons, formatter = {c.id: c for c in self.ctx.run.dataset.comparisons}, self.formatter
        prompt_ids, users = {}, []
        for user in members:
            for pair_id in self.ctx.run.split.support.get(user, []):
                pair = comparisons[pair_id]
                ids = formatter.prompt_ids(pair.prompt, history=pair.history)
                text = self.lm.tokenizer.decode(ids)
                if text not in prompt_ids:
                    prompt_ids[text] = ids
                    users.append(user)
        method, backbone = self.trained.method, self.trained.backbone
        shapes = reward_shapes(self.ctx.policy, self.trained)
        score = lambda us, ps, rs: whole_response_rewards(method, backbone, us, ps, rs)  # noqa: E731
        reward = CountedReward(score, formatter, prompt_ids, (shapes["policy"], shapes.get("reward")),
                               self.generation.max_new_tokens)
        return reward, users

    def _policy_for(self, user: str):
        key = self.adapter_of(user)
        if self.merged is None or self.merged[0] != key:
            from dataclasses import replace

            self.merged = (key, replace(self.lm, model=tuned_model(self.lm, self.tunings[key]["state"], self.options)))
        return self.merged[1]

    def prepare(self, examples: list) -> PreparedBatch:
        return plain_prompts(self.formatter, examples)

    def _per_user(self, batch: PreparedBatch, run) -> list:
        """`run(lm, rows)` on each user's rows of the batch with that user's tuned policy, in batch order."""
        out: list = [None] * len(batch.examples)
        for user in dict.fromkeys(batch.users):
            rows = [i for i, u in enumerate(batch.users) if u == user]
            for i, value in zip(rows, run(self._policy_for(user), rows)):
                out[i] = value
        return out

    def generate(self, batch: PreparedBatch) -> Generated:
        max_new = self.generation.max_new_tokens
        ids = self._per_user(batch, lambda lm, rows: decode_from(lm, prefill(lm, [batch.prompts[i] for i in rows]),
                                                                  greedy, max_new))
        shape = self.ctx.policy.shape  # a merged adapter leaves the policy's shape
        return Generated([clean_generation(self.lm.tokenizer, row) for row in ids], [len(row) for row in ids],
                         columns=[greedy_work(shape, len(p), len(row), max_new).columns()
                                  for p, row in zip(batch.prompts, ids)])

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores:
        chosen, rejected = pair_responses(self.formatter, batch.examples)

        def s_base(lm, rows):
            state = prefill(lm, [batch.prompts[i] for i in rows])
            groups = logprobs_from_prefill(lm, state, [[chosen[i] for i in rows], [rejected[i] for i in rows]])
            return [(mean_logprob(c), mean_logprob(r)) for c, r in zip(*groups)]

        scores, n = self._per_user(batch, s_base), len(batch.examples)
        seq = whole_response_rewards(self.trained.method, self.trained.backbone, batch.users * 2, batch.prompts * 2,
                                     chosen + rejected)
        columns = [{} for _ in range(n)]
        if generated is not None:
            add_own_rm_win_rate(self.ctx, self.trained, batch, generated.texts, columns)
        return PairScores(policy=(np.array([s[0] for s in scores]), np.array([s[1] for s in scores])),
                          reward=(seq[:n], seq[n:]), columns=columns)

    def settings(self) -> dict:
        """The cap and the tuning, and the adaptation column's work: the RM's own plus RL's per new user."""
        tunings = list(self.tunings.values())
        rl_total = float(sum(t["flops"] for t in tunings))
        per_user = rl_total / max(1, len(tunings)) if self.trained.method.personalized else 0.0
        settings = self.training_settings()
        adapt = dict(settings["training"].get("adapt_work") or {"flops_per_user": 0.0})
        adapt.update(flops_per_user=(adapt.get("flops_per_user") or 0.0) + per_user, rl_flops_per_user=per_user)
        seconds = float(sum(t.get("seconds", 0.0) for t in tunings))
        training = {**settings["training"], "adapt_work": adapt}
        if self.trained.method.personalized:  # the verdict's measured adaptation seconds: the RM's and RL's
            training["adapt_s"] = training.get("adapt_s", 0.0) + seconds
        settings["training"] = training
        options = self.options
        return {"rl": {"trainer": "GRPO (TRL), LoRA (PEFT)", "steps_cap": options.steps,
                       "generations": options.generations, "prompts_per_step": options.prompts_per_step,
                       "learning_rate": options.learning_rate, "lora_rank": options.lora_rank,
                       "adapters": len(tunings), "rl_flops_total": rl_total, "tuning_s": seconds,
                       "prompts_per_adapter": float(np.mean([t["prompts"] for t in tunings])) if tunings else 0.0,
                       "reward_first_last": [[t["rewards"][0], t["rewards"][-1]] if t["rewards"] else None
                                             for t in tunings]},
                **settings}

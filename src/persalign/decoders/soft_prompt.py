"""Soft-prompt deployment of a policy-side method (P-DPO): generate with the user's learnt soft tokens.

No reward model and no ARGS: the method generates greedily with the user's
soft tokens and ranks the chosen and rejected responses with its implicit
reward β[log π_θ − log π_ref] (policy accuracy). Its rows carry no RM
accuracy or win rate, so the report shows "-" there.

    persalign run demo methods='[{name: pdpo}]'
"""

from __future__ import annotations

import numpy as np

from persalign.core.registry import register_decoder
from persalign.decoders.args import plain_prompts
from persalign.decoders.base import (DeploymentProperties, Generated, PairScores, PreparedBatch, TrainedDeployment,
                                     pair_responses)
from persalign.engine.cost import greedy_work, shape_of
from persalign.engine.decoding import clean_generation


@register_decoder("soft_prompt")
class SoftPromptDeployment(TrainedDeployment):
    """The policy with the user's soft tokens; pairs ranked by the method's implicit reward."""

    properties = DeploymentProperties(seed_dependent=True, learns_from_pairs=True, needs="policy_method")

    def prepare(self, examples: list) -> PreparedBatch:
        return plain_prompts(self.formatter, examples)

    def generate(self, batch: PreparedBatch) -> Generated:
        lm, max_new = self.trained.lm, self.generation.max_new_tokens
        ids = self.trained.method.generate(lm, batch.users, batch.prompts, max_new)
        soft, shape = self.trained.method.soft_token_count, shape_of(lm.model)  # the soft tokens are prefilled too
        work = [greedy_work(shape, len(p) + soft, len(row), max_new).columns() for p, row in zip(batch.prompts, ids)]
        return Generated([clean_generation(lm.tokenizer, row) for row in ids], [len(row) for row in ids],
                         columns=work)

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores:
        n = len(batch.examples)
        chosen, rejected = pair_responses(self.formatter, batch.examples)
        implicit = np.asarray(self.trained.method.implicit_rewards(
            self.trained.lm, batch.users * 2, batch.prompts * 2, chosen + rejected,
            self.generation.batch_size))
        return PairScores(policy=(implicit[:n], implicit[n:]))

    def settings(self) -> dict:
        return self.training_settings()

"""Reward-free deployments: the policy, prompted (with or without the user's demonstrations), greedy.

Shared by zero-shot (Eq. 4, s_base) and ICL / ICL-RAG (Eq. 7, s_ICL): the
prompt holds the decoder's demonstrations, one forward over the prompts (a
prefill) serves both greedy generation and the scoring of the chosen and
rejected responses, and a pair is ranked by the mean log-likelihood of each
response given that same prompt.

    persalign run demo decoders='[{name: zero_shot}, {name: icl, shots: 4}]'
"""

from __future__ import annotations

import numpy as np

from persalign.core.errors import ConfigError
from persalign.core.records import UserItem
from persalign.decoders.base import DeploymentBase, Generated, PairScores, PreparedBatch, pair_responses
from persalign.engine.cost import greedy_work
from persalign.engine.decoding import clean_generation, decode_from, greedy, prefill
from persalign.engine.scoring import logprobs_from_prefill, mean_logprob


class PromptedDeployment(DeploymentBase):
    """Subclasses choose the demonstrations (`demos`); everything else is shared."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.config = ctx.planned.decoder_config
        self.label = ctx.cell.decoder
        self.lm, self.formatter = ctx.policy.lm, ctx.policy.formatter
        self.built: dict[str, tuple[list[int], dict]] = {}  # example id -> (prompt, columns): built once

    @property
    def generation(self):
        """The run's generation settings (the one run setting a prompted deployment reads)."""
        return self.ctx.run.config.generation

    @classmethod
    def check(cls, config) -> None:
        """A deployment without demonstrations refuses their settings rather than ignore them."""
        given = [key for key, unset in (("shots", 0), ("draw", None)) if getattr(config, key) != unset]
        if given:
            raise ConfigError(f"decoder {config.name}: takes no demonstrations, so {' and '.join(given)} would be "
                              "ignored; remove it or use icl / icl_rag")

    def demos(self, example) -> list[UserItem]:
        return []

    def prepare(self, examples: list) -> PreparedBatch:
        for ex in examples:
            if ex.id not in self.built:
                self.built[ex.id] = self._build(ex)
        return PreparedBatch(examples, [self.built[ex.id][0] for ex in examples],
                             [dict(self.built[ex.id][1]) for ex in examples])

    def _build(self, ex) -> tuple[list[int], dict]:
        drawn = self.demos(ex)
        ids, shown, input_cut = self.formatter.fit(ex.comparison.prompt, drawn, ex.comparison.history)
        # the demonstrations recorded are those in the prompt, not those drawn
        return ids, {"demo_ids": [d.id for d in drawn[:shown]], "demos_dropped": len(drawn) - shown,
                     "input_cut": input_cut, "prompt_tokens": len(ids)}

    def shared_prefix(self, example) -> tuple[int, int]:
        """(tokens of the example's prompt read from a shared prefix cache, prompts sharing it): none here."""
        return 0, 1

    def _prefill(self, batch: PreparedBatch):
        if batch.state is None:  # one pass over the prompts serves generation and scoring
            batch.state = prefill(self.lm, batch.prompts)
        return batch.state

    def generate(self, batch: PreparedBatch) -> Generated:
        max_new = self.generation.max_new_tokens
        ids = decode_from(self.lm, self._prefill(batch), greedy, max_new)
        shape = self.ctx.policy.shape
        work = [greedy_work(shape, len(p), len(row), max_new, shared=self.shared_prefix(ex)).columns()
                for p, row, ex in zip(batch.prompts, ids, batch.examples)]
        return Generated([clean_generation(self.lm.tokenizer, row) for row in ids], [len(row) for row in ids],
                         columns=work)

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores:
        chosen, rejected = pair_responses(self.formatter, batch.examples)
        chosen_lp, rejected_lp = logprobs_from_prefill(self.lm, self._prefill(batch), [chosen, rejected])
        return PairScores(policy=(np.array([mean_logprob(lp) for lp in chosen_lp]),
                                  np.array([mean_logprob(lp) for lp in rejected_lp])))

    def settings(self) -> dict:
        return {"shots": self.config.shots}

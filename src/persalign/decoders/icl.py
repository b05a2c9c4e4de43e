"""In-context learning: the user's own demonstrations in the prompt (paper §4, Eq. 7).

- `icl`: `shots` demonstrations drawn at random (seeded per example) from the
  user's demo pool (support items).
- `icl_rag`: the `shots` pool items whose inputs are most similar to the query
  input (cosine similarity of the data set's embedder), most similar first.

Policy accuracy uses s_ICL (Eq. 7): the mean log-likelihood with the demos.

    persalign run demo decoders='[{name: icl_rag, shots: 4}]'
"""

from __future__ import annotations

import numpy as np

from persalign.decoders.base import DeploymentProperties, example_rng
from persalign.decoders.prompted import PromptedDeployment
from persalign.errors import ConfigError
from persalign.records import UserItem
from persalign.registry import register_decoder


class _ShotsDecoder(PromptedDeployment):
    """Shared set-up: `shots` demonstrations from the user's pool (never the query item)."""

    prefix = "ICL"

    @classmethod
    def check(cls, config) -> None:
        if config.shots < 1:
            raise ConfigError(f"decoder {config.name}: shots must be >= 1, got {config.shots}")

    @classmethod
    def default_label(cls, config) -> str:
        return f"{cls.prefix} ({config.shots}-shot)"

    def pool(self, example) -> list[UserItem]:
        return [item for item in self.ctx.run.eval_context.demo_pool(example.comparison.user) if item.id != example.id]


@register_decoder("icl")
class RandomICL(_ShotsDecoder):
    """`shots` random demonstrations from the user's support set."""

    properties = DeploymentProperties(seed_dependent=True, uses_demonstrations=True)

    def demos(self, example) -> list[UserItem]:
        pool = self.pool(example)
        if not pool:
            return []
        rng = example_rng(self.ctx.seed, example.id)
        picks = rng.choice(len(pool), size=min(self.config.shots, len(pool)), replace=False)
        return [pool[i] for i in picks]


@register_decoder("icl_rag")
class RetrievalICL(_ShotsDecoder):
    """The `shots` most similar demonstrations from the user's support set."""

    properties = DeploymentProperties(uses_demonstrations=True, retrieves_demonstrations=True)
    prefix = "ICL-RAG"

    def demos(self, example) -> list[UserItem]:
        pool = self.pool(example)
        if not pool:
            return []
        embedder = self.ctx.run.eval_context.embedder
        if embedder is None:
            raise ConfigError("icl_rag needs an embedder (data.embedder)")
        vectors = embedder.encode([example.comparison.prompt] + [item.input or item.output for item in pool])
        sims = vectors[1:] @ vectors[0]
        order = np.argsort(-sims, kind="stable")[: self.config.shots]
        return [pool[i] for i in order]

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

from persalign.config import DecoderConfig
from persalign.decoders.base import EvalContext, example_rng
from persalign.errors import ConfigError
from persalign.records import UserItem
from persalign.registry import register_decoder


class _ShotsDecoder:
    """Shared set-up: `shots` demonstrations from the user's pool (never the query item)."""

    prefix = "ICL"

    def __init__(self, config: DecoderConfig):
        if config.shots < 1:
            raise ConfigError(f"decoder {config.name}: shots must be >= 1, got {config.shots}")
        self.shots = config.shots
        self.label = config.label or f"{self.prefix} ({config.shots}-shot)"

    def pool(self, context: EvalContext, user: str, example_id: str) -> list[UserItem]:
        return [item for item in context.demo_pool(user) if item.id != example_id]


@register_decoder("icl")
class RandomICL(_ShotsDecoder):
    """`shots` random demonstrations from the user's support set."""

    seed_dependent = True

    def demos(self, context: EvalContext, user: str, example_id: str, query_input: str, seed: int) -> list[UserItem]:
        pool = self.pool(context, user, example_id)
        if not pool:
            return []
        picks = example_rng(seed, example_id).choice(len(pool), size=min(self.shots, len(pool)), replace=False)
        return [pool[i] for i in picks]


@register_decoder("icl_rag")
class RetrievalICL(_ShotsDecoder):
    """The `shots` most similar demonstrations from the user's support set."""

    seed_dependent = False
    prefix = "ICL-RAG"

    def demos(self, context: EvalContext, user: str, example_id: str, query_input: str, seed: int) -> list[UserItem]:
        pool = self.pool(context, user, example_id)
        if not pool:
            return []
        if context.embedder is None:
            raise ConfigError("icl_rag needs an embedder (data.embedder)")
        vectors = context.embedder.encode([query_input] + [item.input or item.output for item in pool])
        sims = vectors[1:] @ vectors[0]
        order = np.argsort(-sims, kind="stable")[: self.shots]
        return [pool[i] for i in order]

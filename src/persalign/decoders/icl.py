"""In-context learning: the user's own demonstrations in the prompt (paper §4, Eq. 7).

- `icl`: `shots` demonstrations drawn at random from the user's demo pool (support
  items): by default once per user and seed, the paper's one set D_k^demo ⊂ D_k^support
  for every query of user k (`draw: per_query` draws a new set for each query instead).
- `icl_rag`: the `shots` pool items whose inputs are most similar to the query
  input (cosine similarity of the data set's embedder), most similar first.

The prompt prefix a user's prompts share (the instruction and, with per-user demos,
the whole demonstration block) is prefilled once per user and its KV cache reused
for each of that user's queries (persalign.engine.prefix_cache), for generation and for
s_ICL alike; the cell's batches hold one user's queries together for that.

Policy accuracy uses s_ICL (Eq. 7): the mean log-likelihood with the demos.

    persalign run demo decoders='[{name: icl, shots: 4}, {name: icl, shots: 4, draw: per_query}]'
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from persalign.core.errors import ConfigError
from persalign.core.records import UserItem
from persalign.core.registry import register_decoder
from persalign.decoders.base import DeploymentProperties, PreparedBatch, example_rng
from persalign.decoders.prompted import PromptedDeployment
from persalign.engine.prefix_cache import PrefixCache, shared_prefix_lengths
from persalign.models.embedders import similarities


class _ShotsDecoder(PromptedDeployment):
    """Shared set-up: `shots` demonstrations from the user's pool (never the query item), each user's
    common prompt prefix prefilled once."""

    prefix = "ICL"
    draws = ("per_query",)  # the ways this decoder may draw its demonstrations; the first is its default
    batches_by_user = True  # a user's queries share a prefix: keep them in the same batches

    def __init__(self, ctx):
        super().__init__(ctx)
        self.prefix_cache = PrefixCache(self.lm)
        self.shared: dict[str, tuple[int, int]] = {}  # example id -> (prefix tokens, prompts sharing them)

    @classmethod
    def check(cls, config) -> None:
        if config.shots < 1:
            raise ConfigError(f"decoder {config.name}: shots must be >= 1, got {config.shots}")
        if config.draw is not None and config.draw not in cls.draws:
            raise ConfigError(f"decoder {config.name}: draw must be one of {list(cls.draws)}, got {config.draw!r}")

    @classmethod
    def default_label(cls, config) -> str:
        per_query = config.draw == "per_query" and cls.draws[0] != "per_query"
        return f"{cls.prefix} ({config.shots}-shot{', per query' if per_query else ''})"

    @property
    def draw(self) -> str:
        return self.config.draw or self.draws[0]

    def begin(self) -> None:
        """Each user's shared prompt prefix over the cell's examples (so a row's share is batch-free)."""
        examples = self.ctx.run.examples
        prompts = self.prepare(examples).prompts
        users = [ex.comparison.user for ex in examples]
        lengths = shared_prefix_lengths(prompts, users)
        sharers = Counter(user for user, n in zip(users, lengths) if n)
        self.shared = {ex.id: (n, sharers[ex.comparison.user] if n else 1) for ex, n in zip(examples, lengths)}

    def shared_prefix(self, example) -> tuple[int, int]:
        return self.shared.get(example.id, (0, 1))

    def _prefill(self, batch: PreparedBatch):
        if batch.state is None:
            shared = [self.shared_prefix(ex)[0] for ex in batch.examples]
            batch.state = self.prefix_cache.prefill(batch.prompts, shared)
        return batch.state

    def pool(self, example) -> list[UserItem]:
        return [item for item in self.ctx.run.eval_context.demo_pool(example.comparison.user) if item.id != example.id]

    def settings(self) -> dict:
        return {"shots": self.config.shots, "draw": self.draw}


@register_decoder("icl")
class RandomICL(_ShotsDecoder):
    """`shots` random demonstrations from the user's support set: one set per user (default) or per query."""

    properties = DeploymentProperties(seed_dependent=True, uses_demonstrations=True)
    draws = ("per_user", "per_query")

    def demos(self, example) -> list[UserItem]:
        user = example.comparison.user
        if self.draw == "per_query":
            pool, key = self.pool(example), example.id
        else:  # one set for all of the user's queries: drawn with the same key for each of them
            pool, key = self.ctx.run.eval_context.demo_pool(user), f"demonstrations of user {user}"
        if not pool:
            return []
        picks = example_rng(self.ctx.seed, key).choice(len(pool), size=min(self.config.shots, len(pool)), replace=False)
        return [pool[i] for i in picks if pool[i].id != example.id]  # a query never demonstrates itself


@register_decoder("icl_rag")
class RetrievalICL(_ShotsDecoder):
    """The `shots` most similar demonstrations from the user's support set."""

    properties = DeploymentProperties(uses_demonstrations=True, retrieves_demonstrations=True)
    prefix = "ICL-RAG"

    def settings(self) -> dict:
        return {"shots": self.config.shots, "draw": "retrieved"}

    def demos(self, example) -> list[UserItem]:
        pool = self.pool(example)
        if not pool:
            return []
        embedder = self.ctx.run.eval_context.embedder
        if embedder is None:
            raise ConfigError("icl_rag needs an embedder (data.embedder)")
        vectors = embedder.encode([example.comparison.prompt] + [item.input or item.output for item in pool])
        sims = similarities(vectors[:1], vectors[1:])[0]
        order = np.argsort(-sims, kind="stable")[: self.config.shots]
        return [pool[i] for i in order]

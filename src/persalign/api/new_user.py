"""New users adapted on the fly (issue #54): a finished run's deployment, given a few texts or preferences of a
person the run never saw, adapts to them the way the run adapted its own users (paper §3: z_k = A(D_support, θ)).

A new user is given as JSON lines (`--new-users FILE`), one record each:
`{"user", "prompt", "output"}` (a text the person wrote for the task's input) or
`{"user", "prompt", "chosen", "rejected"}` (a preference the person stated). Their texts (or chosen answers)
become the support set ICL draws from and ICL-RAG retrieves from; a reward model (ARGS) or P-DPO's soft prompt
adapts on their pairs: the stated ones, and each text paired with a hard negative mined the run's way
(Pref-LaMP, paper §5: one of the k texts of the run's train users whose inputs are most similar by the data's
embedder, drawn with the cell's seed). The trained parameters shared by all users stay as the run trained them.

    persalign generate runs/demo/demo --deployment LoRE --new-users me.jsonl --user Me "Storm closes the harbour"
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from persalign.core.errors import ConfigError, DataError
from persalign.core.records import Comparison, PreferenceDataset, UserItem
from persalign.data.jsonio import read_jsonl, require_text
from persalign.data.mining import mine_negatives

KINDS = {"text": ("prompt", "output"), "preference": ("prompt", "chosen", "rejected")}


@dataclass
class NewUser:
    name: str
    texts: list[UserItem] = field(default_factory=list)  # what the person wrote (their ICL demonstrations)
    pairs: list[Comparison] = field(default_factory=list)  # what the person preferred, as stated

    def support_items(self) -> list[UserItem]:
        """The demonstrations: their texts, then the chosen answer of each stated pair (a repeated one is shown
        once: EvalContext.demo_pool keeps each (input, output) once, as for the run's own users)."""
        return self.texts + [UserItem(pair.id, self.name, pair.prompt, pair.chosen) for pair in self.pairs]


def read_new_users(path: str | Path) -> dict[str, NewUser]:
    """The file's users, in the order they first appear; a bad record is a DataError naming its line."""
    users: dict[str, NewUser] = {}
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        if not isinstance(record, dict):
            raise DataError(path, "a record must be a JSON object", where)
        name = require_text(record, "user", path, where)
        kind = "preference" if "chosen" in record or "rejected" in record else "text"
        fields = [require_text(record, key, path, where) for key in KINDS[kind]]
        user = users.setdefault(name, NewUser(name))
        record_id = f"new-{name}-{lineno}"
        if kind == "text":
            user.texts.append(UserItem(record_id, name, *fields))
        else:
            user.pairs.append(Comparison(record_id, name, *fields))
    if not users:
        raise DataError(path, "no record: give one JSON object per line, {\"user\", \"prompt\", \"output\"} or "
                              "{\"user\", \"prompt\", \"chosen\", \"rejected\"}")
    return users


def mined_pairs(run_ctx, user: NewUser, seed: int) -> list[Comparison]:
    """Each of the user's texts against a hard negative from the run's train users' texts (Pref-LaMP)."""
    if not user.texts:
        return []
    embedder = run_ctx.eval_context.embedder
    if embedder is None:
        raise ConfigError(f"new user {user.name!r}: texts need hard negatives, and this run has no embedder "
                          "(data.embedder); give preferences (prompt, chosen, rejected) instead")
    pool = _train_texts(run_ctx)
    inputs = [t.input for t in user.texts] + [prompt for prompt, _, _ in pool]
    embeddings = embedder.encode(inputs).astype(np.float32)
    owners = np.array([0] * len(user.texts) + [1 + owner for _, _, owner in pool])
    rows, others = np.arange(len(user.texts)), np.arange(len(user.texts), len(inputs))
    rng = np.random.default_rng([seed, zlib.crc32(user.name.encode("utf-8"))])
    picks, _ = mine_negatives(embeddings, owners, rows, others, run_ctx.config.data.negatives_top_k, rng)
    return [Comparison(text.id, user.name, text.input, text.output, pool[pick - len(user.texts)][1])
            for text, pick in zip(user.texts, picks)]


def _train_texts(run_ctx) -> list[tuple[str, str, int]]:
    """(input, the train user's text, the train user's number) for every train and held-out pair."""
    split, by_id = run_ctx.split, {c.id: c for c in run_ctx.dataset.comparisons}
    pool, seen = [], set()
    for number, owner in enumerate(split.train_users):
        for pair_id in split.train.get(owner, []) + split.heldout.get(owner, []):
            c = by_id[pair_id]
            if (c.prompt, c.chosen) not in seen:
                seen.add((c.prompt, c.chosen))
                pool.append((c.prompt, c.chosen, number))
    if not pool:
        raise ConfigError("new users: this run has no train users' texts to mine hard negatives from; give "
                          "preferences (prompt, chosen, rejected) instead")
    return pool


def check_adaptable(planned, trained, name: str, known: set[str]) -> None:
    """A one-line refusal where this deployment cannot take this new user."""
    if name in known:
        raise ConfigError(f"new user {name!r}: already a user of this run (give them another name, or use the run's "
                          "own adaptation)")
    label = planned.cell.decoder
    if planned.properties.reranks_samples:
        raise ConfigError(f"{label}: Best-of-N reranks the samples the run drew for its own users' queries; a new "
                          "user has none")
    if planned.properties.tunes_policy and getattr(getattr(trained, "method", None), "personalized", False):
        raise ConfigError(f"{label}: the RL leg tunes the policy for each user with GRPO; a new user is not tuned on "
                          "the fly (add them to the data and run again)")


def adapt_trained(run_ctx, ctx, user: NewUser, pairs: list[Comparison]) -> None:
    """The cell's trained component adapted to the user's pairs (its shared parameters untouched)."""
    from persalign.rewards.method import precompute_features
    from persalign.rewards.train import pair_data
    from persalign.runner.trained import TrainedReward, plugin_call, reward_formatter

    trained = ctx.trained
    if isinstance(trained, TrainedReward):
        where, formatter = trained.backbone, reward_formatter(run_ctx.config, trained.backbone, run_ctx.dataset.task)
    else:  # a policy-side method (P-DPO): trained on the policy, read with its formatter
        where, formatter = trained.lm, ctx.policy.formatter
    own = PreferenceDataset(run_ctx.dataset.name, run_ctx.dataset.task, pairs)  # what pair_data reads
    data = pair_data(own, {user.name: [p.id for p in pairs]}, formatter, [user.name])
    if hasattr(where, "trainable"):
        precompute_features(trained.method, where, data)
    plugin_call(trained.method, "adapt", where, user.name, data)
    trained.method.eval()


def add_new_user(run_ctx, ctx, user: NewUser) -> None:
    """The user's demonstrations registered with the run's evaluation context, then the trained component
    adapted (where the cell has one) to their stated pairs and their texts paired with mined negatives."""
    items = user.support_items()
    if not items:
        raise ConfigError(f"new user {user.name!r}: no text and no preference")
    run_ctx.eval_context.items.update({item.id: item for item in items})
    run_ctx.split.support[user.name] = [item.id for item in items]
    if ctx.trained is not None:
        adapt_trained(run_ctx, ctx, user, mined_pairs(run_ctx, user, ctx.seed) + user.pairs)

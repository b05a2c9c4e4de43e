"""Generation with a finished run's deployment (issue #54): `persalign generate RUN --deployment NAME --user USER
PROMPT...` and `persalign.open_run(RUN).deployment(NAME).generate(user, prompts)`.

The run's own code path, reopened from its folder: the stored config, the same data and split, the policy, the
cell's trained component as the run stored it (a reward model with its users' adaptations and the chosen λ, P-DPO's
soft prompt), and the cell's registered decoder. A prompt the run already answered for that user is that query
example again, so its stored generation comes back exactly; another prompt is a new example of the same user.
Users are the run's adaptation users, and new users adapted on the fly from a few of their texts or preferences
the way the run adapted its own (`add_users`, persalign/api/new_user.py).

    persalign generate runs/demo/demo --deployment "ICL-RAG (4-shot)" --user "Abe Local" "Storm closes the harbour"
"""

from __future__ import annotations

import time

from persalign.core.errors import ConfigError


class RunDeployment:
    """One deployment (a cell: label × policy × seed) of a finished run, ready to generate for its users."""

    def __init__(self, run, label: str, seed: int | None = None, policy: str | None = None):
        from persalign.core.config import RunConfig
        from persalign.core.typed_yaml import from_dict
        from persalign.runner.plan import plan

        self.run, self.config = run, from_dict(RunConfig, run.config(), where=str(run.path / "config.yaml"))
        planned = plan(self.config)
        cells = [p for p in planned if p.cell.decoder == label]
        if not cells:
            labels = sorted({p.cell.decoder for p in planned})
            raise ConfigError(f"{run.path}: no deployment {label!r} (this run's: {', '.join(labels)})")
        wanted = [p for p in cells
                  if (seed is None or p.cell.seed == seed) and (policy is None or p.cell.policy == policy)]
        if not wanted:
            seeds, policies = sorted({p.cell.seed for p in cells}), sorted({p.cell.policy for p in cells})
            raise ConfigError(f"{label}: no cell of seed {seed} and policy {policy} (seeds {seeds}, policies "
                              f"{policies})")
        self.planned, self._ready, self.new_users = wanted[0], None, set()

    def _build(self):
        """The run context, the policy, the trained component and the decoder, as the run built them."""
        from persalign.core.registry import DECODERS
        from persalign.runner.cells import load_policy, policy_context, provide_trained, run_context, trained_providers
        from persalign.runner.context import CellContext

        run_ctx = run_context(self.config, self.run.store, lambda *_: None)
        policy_ctx = policy_context(run_ctx, load_policy(self.config, self.planned.cell.policy))
        ctx = CellContext(policy_ctx, self.planned)
        if self.planned.needs:
            ctx.trained = provide_trained(self.planned, policy_ctx, trained_providers(self.config, self.run.store))
        deployment = DECODERS.get(self.planned.decoder)(ctx)
        deployment.begin()  # e.g. ARGS reads the λ the run chose (lambda.json)
        return run_ctx, ctx, deployment

    def _parts(self):
        if self._ready is None:
            self._ready = self._build()
        return self._ready

    def users(self) -> list[str]:
        """Who this deployment writes for: the run's adaptation users, then the new users added."""
        return sorted(self._parts()[0].split.adapt_users) + sorted(self.new_users)

    def add_users(self, users: dict) -> float:
        """Adapt new users (persalign.api.new_user.read_new_users: name -> NewUser) the way the run adapted its
        own; the seconds it took. A user already in the run, or a deployment that cannot adapt, is refused."""
        from persalign.api.new_user import add_new_user, check_adaptable

        run_ctx, ctx, _ = self._parts()
        known = set(run_ctx.split.adapt_users) | set(run_ctx.split.train_users) | self.new_users
        for name in users:
            check_adaptable(self.planned, ctx.trained, name, known)
        started = time.perf_counter()
        for name, user in users.items():
            add_new_user(run_ctx, ctx, user)
            self.new_users.add(name)
        return time.perf_counter() - started

    def generate(self, user: str, prompts: list[str]) -> list[str]:
        """The deployment's output for `user` on each prompt, one prompt at a time (decoding is batch-invariant)."""
        run_ctx, _, deployment = self._parts()
        if user not in run_ctx.split.adapt_users and user not in self.new_users:
            raise ConfigError(f"user {user!r}: not an adaptation user of this run ({len(run_ctx.split.adapt_users)} "
                              f"are, e.g. {', '.join(sorted(run_ctx.split.adapt_users)[:3])}; a new user is "
                              "adapted from their texts with --new-users FILE)")
        return [deployment.generate(deployment.prepare([self._example(run_ctx, user, p, i)])).texts[0]
                for i, p in enumerate(prompts)]

    def _example(self, run_ctx, user: str, prompt: str, index: int):
        """The run's query example of this user with this prompt, or a new example of the user."""
        from persalign.core.records import Comparison
        from persalign.runner.evaluate import Example

        known = next((ex for ex in run_ctx.examples if ex.comparison.user == user and ex.comparison.prompt == prompt),
                     None)
        if known is not None:
            return known
        if self.planned.properties.reranks_samples:
            raise ConfigError(f"{self.planned.cell.decoder}: Best-of-N reranks the samples the run drew for its own "
                              "query prompts; give one of them (persalign export RUN --format rows lists them)")
        return Example(Comparison(f"generate-{index}", user, prompt, "", ""), None)

"""Generation with a finished run's deployment (issue #54): `persalign generate RUN --deployment NAME --user USER
PROMPT...` and `persalign.open_run(RUN).deployment(NAME).generate(user, prompts)`.

The run's own code path, reopened from its folder: the stored config, the same data and split, the policy, the
cell's trained component as the run stored it (a reward model with its users' adaptations and the chosen λ, P-DPO's
soft prompt), and the cell's registered decoder. A prompt the run already answered for that user is that query
example again, so its stored generation comes back exactly; another prompt is a new example of the same user.
Users are the run's adaptation users (a new user's adaptation on the fly is not built).

    persalign generate runs/demo/demo --deployment "ICL-RAG (4-shot)" --user "Abe Local" "Storm closes the harbour"
"""

from __future__ import annotations

from persalign.core.errors import ConfigError


class RunDeployment:
    """One deployment (a cell: label × policy × seed) of a finished run, ready to generate for its users."""

    def __init__(self, run, label: str, seed: int | None = None, policy: str | None = None):
        from persalign.core.config import RunConfig
        from persalign.core.typed_yaml import from_dict
        from persalign.runner.plan import plan

        self.run, self.config = run, from_dict(RunConfig, run.config(), where=str(run.path / "config.yaml"))
        cells = [p for p in plan(self.config) if p.cell.decoder == label]
        if not cells:
            labels = sorted({p.cell.decoder for p in plan(self.config)})
            raise ConfigError(f"{run.path}: no deployment {label!r} (this run's: {', '.join(labels)})")
        wanted = [p for p in cells
                  if (seed is None or p.cell.seed == seed) and (policy is None or p.cell.policy == policy)]
        if not wanted:
            seeds, policies = sorted({p.cell.seed for p in cells}), sorted({p.cell.policy for p in cells})
            raise ConfigError(f"{label}: no cell of seed {seed} and policy {policy} (seeds {seeds}, policies "
                              f"{policies})")
        self.planned, self._ready = wanted[0], None

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
        return run_ctx, deployment

    def generate(self, user: str, prompts: list[str]) -> list[str]:
        """The deployment's output for `user` on each prompt, one prompt at a time (decoding is batch-invariant)."""
        if self._ready is None:
            self._ready = self._build()
        run_ctx, deployment = self._ready
        if user not in run_ctx.split.adapt_users:
            raise ConfigError(f"user {user!r}: not an adaptation user of this run ({len(run_ctx.split.adapt_users)} "
                              f"are, e.g. {', '.join(sorted(run_ctx.split.adapt_users)[:3])})")
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

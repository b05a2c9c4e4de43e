"""Resolve once, then flow down (issue #53): a config becomes a validated, resolved run before the run folder is
touched, and the run's stages take what was resolved instead of reading the config again.

Every check runs here once, in the order a user fixes them: value ranges (core/config_checks); the data set,
embedder, metrics and methods the config names, each method's settings and what only the method can check
(runner/plan.check_methods); the cells, planned once (labels and folders distinct); the device and the cache
folder; each model's config, read once, against ARGS's top-k, the generation length and each method's memory
need (models/checks); and whether the reward models can read every policy's token ids. A refused config
leaves nothing behind.

    python -c "from persalign.core.config import load_config; from persalign.runner.resolve import resolve_run; \
print(len(resolve_run(load_config('demo')).cells), 'cells')"
"""

from __future__ import annotations

from dataclasses import dataclass, field

from persalign.core.config import RunConfig
from persalign.core.config_checks import validate
from persalign.core.errors import ConfigError
from persalign.models.checks import check_cache_dir, check_device, check_model_limits, policy_config
from persalign.models.numerics import pin_kernels
from persalign.runner.plan import PlannedCell, check_method_size, check_methods, plan
from persalign.runner.store import check_distinct_dirs


@dataclass(frozen=True)
class ResolvedRun:
    """A run every check has passed: its config, its cells (planned once) and its models' configs (read once)."""

    config: RunConfig
    cells: tuple[PlannedCell, ...]
    model_configs: dict = field(default_factory=dict)  # model name -> its transformers config (no weights)

    def cells_of(self, policy: str) -> list[PlannedCell]:
        return [p for p in self.cells if p.cell.policy == policy]


def resolve_run(config: RunConfig, values_checked: bool = False) -> ResolvedRun:
    """The resolved run, or the first ConfigError a user would have to fix. `values_checked`: the config comes
    from load_config, whose value checks it passed (they are not run again); one built in code has not."""
    pin_kernels()  # before the checks below run torch's first operation (models/numerics.py)
    if not values_checked:
        validate(config)
    check_methods(config)
    cells = tuple(plan(config))
    if not cells:
        raise ConfigError("config: the run plans no cells (decoders and methods are empty, or every deployment "
                          "of the methods is switched off: args.enabled / best_of_n.enabled)")
    check_distinct_dirs([p.cell for p in cells])
    check_device(config.device)
    check_cache_dir(config.cache_dir)
    resolved = ResolvedRun(config, cells, _model_configs(config))
    check_sizes(config, resolved.model_configs)
    check_shared_rewards(resolved)
    for policy in config.policies:
        check_model_limits(config, policy, resolved.model_configs[policy])
    return resolved


def _model_configs(config: RunConfig) -> dict:
    """Each policy's config (a model that cannot be read is refused here, naming it)."""
    return {name: policy_config(name, config.cache_dir) for name in config.policies}


def check_sizes(config: RunConfig, model_configs: dict | None = None) -> None:
    """Each method's memory need at the reward backbone's width (its config from `model_configs` where read
    already). A backbone that cannot be read here is refused where it is loaded."""
    from persalign.core.registry import METHODS

    backbone = config.reward.backbone or config.policies[0]
    try:
        hidden = ((model_configs or {}).get(backbone) or policy_config(backbone, config.cache_dir)).hidden_size
    except Exception:  # noqa: BLE001  (sized when it is built instead)
        return
    for i, method in enumerate(config.methods):
        check_method_size(METHODS.get(method.name), method, config.reward, hidden, f"config.methods[{i}]")


def check_shared_rewards(resolved: ResolvedRun) -> None:
    """A reward model is trained once, on the reward backbone, and reads every policy's token ids (ARGS scores
    the policy's candidate tokens): refused before any work where a policy's tokenizer is not the backbone's,
    since every id would then mean another text. The paper shares one RM across the scales of one family."""
    config = resolved.config
    backbone = config.reward.backbone or config.policies[0]
    if not any(p.needs == "reward_model" for p in resolved.cells) or set(config.policies) == {backbone}:
        return
    from persalign.models.checks import policy_tokenizer

    reference = policy_tokenizer(backbone, config.cache_dir).get_vocab()
    for policy in config.policies:
        if policy != backbone and policy_tokenizer(policy, config.cache_dir).get_vocab() != reference:
            raise ConfigError(f"config.policies: {policy!r} does not share the tokenizer of the reward backbone "
                              f"{backbone!r}, and reward models read the policy's token ids; run that policy in a "
                              "run of its own (or with reward.backbone set to a model of its tokenizer)")

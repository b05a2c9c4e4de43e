"""The cell planner: every (deployment × method × policy × seed) cell of a config, and what each needs.

A cell is one deployment of one policy for one seed; reward-free deployments
(zero-shot, ICL, ICL-RAG) come from `config.decoders`, the others from
`config.methods`: each method declares the deployments it can have
(`deployments`: ARGS and Best-of-N for a reward model, soft-prompt generation
for a policy-side method) and the config switches ARGS and Best-of-N on or
off. Seed-free deployments run once (first seed). What a cell needs (nothing,
a trained reward model, a trained policy-side method) is the decoder's
declared `properties.needs`; `decoder_index` orders rows in the reports.

    python -c "from persalign.core.config import load_config; from persalign.runner.plan import plan; \
print(*[p.cell for p in plan(load_config('demo'))], sep='\\n')"
"""

from __future__ import annotations

from dataclasses import dataclass

from persalign.core.config import DecoderConfig, MethodConfig, RunConfig
from persalign.core.errors import ConfigError
from persalign.core.registry import DECODERS, METHODS
from persalign.rewards.settings import check_settings
from persalign.runner.store import Cell


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    decoder: str  # the registered decoder (deployment) name
    decoder_index: int  # the report's row order
    decoder_config: DecoderConfig | None = None  # reward-free deployments
    method: MethodConfig | None = None  # deployments of a trained method
    method_label: str | None = None

    @property
    def properties(self):
        return DECODERS.get(self.decoder).properties

    @property
    def needs(self) -> str | None:
        return self.properties.needs


def _unique(labels: list[str], what: str) -> None:
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"{what}: labels must be unique, repeated: {repeated} (set `label`)")


def method_labels(config: RunConfig) -> list[str]:
    labels = [m.label or METHODS.get(m.name).display for m in config.methods]
    _unique(labels, "methods")
    return labels


def deployment_enabled(config: RunConfig, name: str) -> bool:
    """Whether the config switches a method deployment on: the decoder declares its switch (the config
    section with `enabled`); one without a switch (soft prompt, a plugin's) is always on."""
    switch = getattr(DECODERS.get(name), "switch", None)
    return True if switch is None else bool(getattr(config, switch).enabled)


def _seeds(config: RunConfig, decoder_cls) -> list[int]:
    return config.seeds if decoder_cls.properties.seed_dependent else config.seeds[:1]


def baseline_cells(config: RunConfig, policy: str) -> list[PlannedCell]:
    classes = [DECODERS.get(d.name) for d in config.decoders]
    for decoder_config, decoder_cls in zip(config.decoders, classes):
        if decoder_cls.properties.needs:
            raise ConfigError(f"decoders: {decoder_config.name!r} deploys a trained method; list the method under "
                              "`methods` (args.enabled / best_of_n.enabled switch its deployments)")
        decoder_cls.check(decoder_config)
    labels = [d.label or cls.default_label(d) for d, cls in zip(config.decoders, classes)]
    _unique(labels, "decoders")
    return [PlannedCell(Cell(policy, label, seed), decoder_config.name, index, decoder_config=decoder_config)
            for index, (decoder_config, decoder_cls, label) in enumerate(zip(config.decoders, classes, labels))
            for seed in _seeds(config, decoder_cls)]


def method_cells(config: RunConfig, policy: str) -> list[PlannedCell]:
    """Per method and seed, its enabled deployments in the order they run (ARGS before Best-of-N)."""
    count = len(config.decoders)
    cells = []
    for index, (method, label) in enumerate(zip(config.methods, method_labels(config))):
        names = [n for n in METHODS.get(method.name).deployments if deployment_enabled(config, n)]
        for seed in config.seeds:
            for name in names:
                decoder_cls = DECODERS.get(name)
                order = count + decoder_cls.index_block * len(config.methods) + index
                cells.append(PlannedCell(Cell(policy, decoder_cls.label_for_method(label), seed), name, order,
                                         method=method, method_label=label))
    return cells


def cell_kind(planned: PlannedCell) -> str:
    """What kind of work a cell is (its cost differs by kind): best_of_n, rl, args, soft_prompt, icl or zero_shot."""
    properties = planned.properties
    if properties.reranks_samples:
        return "best_of_n"
    if properties.tunes_policy:
        return "rl"
    if properties.needs == "reward_model":
        return "args"
    if properties.needs == "policy_method":
        return "soft_prompt"
    return "icl" if properties.uses_demonstrations else "zero_shot"


def plan(config: RunConfig) -> list[PlannedCell]:
    """Every cell, policy by policy: the reward-free deployments first, then each method's."""
    return [p for policy in config.policies for p in baseline_cells(config, policy) + method_cells(config, policy)]


def check_method_size(method_cls, method, reward, hidden: int, where: str) -> None:
    """Settings that would not fit in this machine's memory (`prototypes: 1000000000`) are refused before
    anything is allocated: the method is built on the meta device at the backbone's width `hidden`, its
    parameters counted, and the float32 weights, gradients and Adam's two moments compared with the machine's
    memory. `reward`: the config's reward section (the settings' defaults)."""
    if getattr(method_cls, "pretrained", False):  # a pretrained RM is sized by its own files
        return
    import os

    import torch

    from persalign.rewards.method import resolve_settings

    try:
        with torch.device("meta"):
            module = method_cls(hidden, resolve_settings(method_cls, method, reward, 0))
        parameters = sum(p.numel() for p in module.parameters())
    except Exception:  # noqa: BLE001  (a method that cannot be built this way is sized when it is built)
        return
    need, total = 16 * parameters, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total:
        raise ConfigError(f"{where}: its settings make {parameters:,} parameters, {need / 2**30:.1f} GiB to train "
                          f"(float32 weights, gradients, Adam), more than this machine's {total / 2**30:.1f} GiB; "
                          "lower the setting that sets its size")


def check_parts(config: RunConfig) -> None:
    """The data set, embedder and metrics a run names resolve to what their registries hold (built in,
    installed, or a module:Object that is a plugin): before any model is loaded or anything is called."""
    from persalign.core.registry import DATASETS, EMBEDDERS, METRICS

    for registry, names in ((DATASETS, [config.data.dataset]), (EMBEDDERS, [config.data.embedder]),
                            (METRICS, list(config.metrics.names))):
        for name in names:
            if isinstance(name, str) and ":" in name:  # a path: imported and its kind checked now
                registry.get(name)


def check_methods(config: RunConfig, where: str = "config") -> None:
    """Each method's name resolves (built in, installed or module:Class) and its settings are its own and in
    range (the rules live beside each field of the method's Settings dataclass): before any cell is planned.
    Their memory need is checked once the models' configs are read (runner/resolve.check_sizes)."""
    check_parts(config)
    for i, method in enumerate(config.methods):
        if not isinstance(method.name, str) or not method.name.strip():
            raise ConfigError(f"{where}.methods[{i}].name: {method.name!r} is not allowed (must be a method name)")
        try:
            method_cls = METHODS.get(method.name)
        except ConfigError as error:
            raise ConfigError(f"{where}.methods[{i}]: {error}") from None
        check_settings(method_cls.Settings, method.settings, f"{where}.methods[{i}]")
        if hasattr(method_cls, "preflight"):  # what only the method can check (a pretrained RM's model)
            method_cls.preflight(method.settings)

"""Method settings: one typed dataclass per reward method, every field documented and range-checked.

A method declares `Settings = MySettings`, a subclass of `MethodSettings` in its
own file that changes defaults and adds its own fields (PAL's prototype count,
GenARM's β). Each field says what it is, the paper's value (appendix F) and its
range, so one source feeds the YAML checks, `persalign list --method NAME` and
the report. In a config the settings sit beside the method's name:

    methods: [{name: pal, prototypes: 6, user_lr: 0.01}]

Precedence (`resolve`): the method's entry > the run's `reward.*` > the
method's own defaults. `reward.adapt_epochs` / `reward.max_steps`, when set,
override every method's default; `reward.batch_size/epochs/patience/
backbone_lr` fill the fields a method leaves empty (P-DPO keeps its batch 8).

    persalign list --method pal
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from persalign.core.config_checks import (  # noqa: F401  (the rules a method's own settings use)
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    OPTIONAL_COUNT,
    OPTIONAL_POSITIVE,
    POSITIVE,
    TEXT,
    check_value,
)
from persalign.core.errors import ConfigError, did_you_mean

FILL = "fill"  # the run's reward.<key> is used when the method leaves the field empty (None)
OVERRIDE = "override"  # the run's reward.<key>, when set, beats the method's default


def setting(default: Any, doc: str, rule=POSITIVE, paper: str | None = None, run_level: str | None = None):
    """A settings field with what `persalign list --method` prints and what the config check enforces."""
    return field(default=default, metadata={"doc": doc, "rule": rule, "paper": paper, "run_level": run_level})


@dataclass
class MethodSettings:
    """Hyper-parameters every trained method has (appendix F.1); a method's subclass adds its own.
    A global method uses these; a personalized one extends PersonalizedSettings."""

    head_lr: float = setting(1e-4, "learning rate of the shared parameters θ (Adam)")
    weight_decay: float = setting(0.0, "weight decay of the shared parameters", NON_NEGATIVE)
    batch_size: int | None = setting(None, "preference pairs per step (null: reward.batch_size)", OPTIONAL_COUNT,
                                     run_level=FILL)
    epochs: int | None = setting(None, "training epochs over the train users' pairs (null: reward.epochs)",
                                 OPTIONAL_COUNT, run_level=FILL)
    patience: int | None = setting(None, "epochs without a better validation accuracy before stopping "
                                   "(null: reward.patience)", OPTIONAL_COUNT, run_level=FILL)
    max_steps: int | None = setting(None, "cap on training steps (reward.max_steps, when set, overrides)",
                                    OPTIONAL_COUNT, run_level=OVERRIDE)
    backbone_lr: float | None = setting(None, "learning rate of the backbone's LoRA adapter in reward.mode=lora "
                                        "(null: reward.backbone_lr)", OPTIONAL_POSITIVE, paper="5e-5", run_level=FILL)
    seed: int = field(default=0, metadata={"doc": "the run's seed (set by the run, not in a config)",
                                           "internal": True})


@dataclass
class PersonalizedSettings(MethodSettings):
    """What every method with per-user parameters z_k adds: how z_k is learnt and adapted to a new user."""

    user_lr: float = setting(1e-2, "learning rate of the per-user parameters z_k (training and adaptation)")
    adapt_epochs: int = setting(100, "epochs fitting a new user's z_k on its support pairs (reward.adapt_epochs, "
                                "when set, overrides)", COUNT, run_level=OVERRIDE)


def latent_dim(default: int, doc: str, paper: str | None = "8 on PRISM and Pref-LaMP, 2 on TL;DR"):
    """The size of a method's user space (its meaning differs per method: bases, prototype space, ...)."""
    return setting(default, doc, COUNT, paper=paper)


def documented(settings_cls) -> list[dataclasses.Field]:
    """The fields a config may set (every field but the run-set ones such as the seed)."""
    return [f for f in dataclasses.fields(settings_cls) if not f.metadata.get("internal")]


def check_settings(settings_cls, values: dict, where: str) -> None:
    """Unknown keys and values outside a field's range are ConfigErrors naming the key and the rule."""
    if not (isinstance(settings_cls, type) and dataclasses.is_dataclass(settings_cls)):
        raise ConfigError(f"{where}: the method's Settings ({settings_cls!r}) is not a dataclass; a plugin "
                          "declares its settings as a @dataclass subclass of MethodSettings (docs/plugins.md)")
    known = {f.name: f for f in documented(settings_cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {unknown}{did_you_mean(unknown[0], known)}; this method's "
                          f"settings: {sorted(known)} "
                          "(persalign list --method NAME documents each)")
    for f in known.values():
        if values.get(f.name) is None and not f.metadata["rule"][0](f.default):
            raise ConfigError(f"{where}: `{f.name}:` is required ({f.metadata['doc']})")
    for key, value in values.items():
        if value is not None:  # null: the method's default (or the run's reward.* where the field says so)
            check_value(value, known[key].metadata["rule"], key, where)


def resolve(settings_cls, entry: dict, reward_config, seed: int):
    """The settings one cell trains with: the entry > the run's reward.* (fill / override) > the defaults."""
    values = {}
    for f in documented(settings_cls):
        run_level, default = f.metadata.get("run_level"), f.default
        run_value = getattr(reward_config, f.name, None) if run_level else None
        if run_level == OVERRIDE and run_value is not None:
            values[f.name] = run_value
        elif run_level == FILL and default is None:
            values[f.name] = run_value
    values.update({k: v for k, v in entry.items() if v is not None})
    return settings_cls(**values, seed=seed)


def describe(settings_cls) -> list[dict]:
    """One row per setting: name, default, allowed range, paper value, what it is (for `persalign list`)."""
    return [{"setting": f.name, "default": f.default, "allowed": f.metadata["rule"][1],
             "paper": f.metadata.get("paper") or "", "what": f.metadata["doc"]} for f in documented(settings_cls)]


def settings_table(name: str, method_cls) -> str:
    """`persalign list --method NAME`: the method, then one line per setting (set beside `name:` in a config)."""
    doc = " ".join((method_cls.Settings.__doc__ or method_cls.__doc__ or "").split("\n\n")[0].split())
    lines = [f"{name} ({getattr(method_cls, 'display', name)}): {doc}",
             f"settings (in a config: methods: [{{name: {name}, SETTING: VALUE}}]):"]
    for row in describe(method_cls.Settings):
        paper = f"; paper: {row['paper']}" if row["paper"] else ""
        lines.append(f"  {row['setting']:<14} {row['default']!s:<8} {row['what']} (must be {row['allowed']}{paper})")
    return "\n".join(lines)

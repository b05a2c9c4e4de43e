"""Small registries so that adding a data set, decoder, metric or method is one file.

    @register_dataset("news_category")
    def load_news(config): ...

`persalign list` prints every registry. Registration happens when the module
defining the entry is imported; `load_builtin_entries()` imports them all.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from persalign.errors import ConfigError


class Registry:
    """A named mapping from string keys to objects, with helpful errors."""

    def __init__(self, kind: str, plural: str | None = None):
        self.kind = kind
        self.plural = plural or kind + "s"
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        def decorator(obj: Any) -> Any:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> Any:
        load_builtin_entries()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {known})")
        return self._entries[name]

    def names(self) -> list[str]:
        load_builtin_entries()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, Any]]:
        load_builtin_entries()
        return sorted(self._entries.items())

    def __contains__(self, name: str) -> bool:
        load_builtin_entries()
        return name in self._entries


DATASETS = Registry("dataset")
DECODERS = Registry("decoder")
METRICS = Registry("generation metric")
MODELS = Registry("model alias", "model aliases")
EMBEDDERS = Registry("embedder")
METHODS = Registry("reward method")

register_dataset = DATASETS.register
register_decoder = DECODERS.register
register_metric = METRICS.register
register_model_alias = MODELS.register
register_embedder = EMBEDDERS.register
register_method = METHODS.register

# Modules whose import registers built-in entries. Importing lazily (on first
# lookup) keeps `import persalign` cheap and free of side effects.
_BUILTIN_MODULES = (
    "persalign.data.news",
    "persalign.data.lamp",
    "persalign.data.builtin_demo",
    "persalign.data.preferences",
    "persalign.data.prism",
    "persalign.models.aliases",
    "persalign.models.embedders",
    "persalign.decoders.zero_shot",
    "persalign.decoders.icl",
    "persalign.metrics.generation",
    "persalign.rewards.global_rm",
    "persalign.rewards.lore",
    "persalign.rewards.pref",
    "persalign.rewards.mpu",
    "persalign.rewards.pal",
    "persalign.rewards.vpl",
    "persalign.rewards.genarm",
    "persalign.rewards.pdpo",
)
_loaded = False


def load_builtin_entries() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def all_registries() -> list[Registry]:
    return [DATASETS, METHODS, DECODERS, METRICS, MODELS, EMBEDDERS]

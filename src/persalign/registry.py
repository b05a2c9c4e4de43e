"""Small registries so that adding a data set, decoder, metric or method is one file.

    @register_dataset("news_category")
    def load_news(config): ...

`persalign list` prints every registry. Registration happens when the module
defining the entry is imported. Each registry knows the package its entries
live in and imports every module of it on first lookup (walking the package,
so a new method file needs no list to be edited). A module that fails to
import is reported with its real error, and the registry is not marked
loaded, instead of later claiming "unknown method".
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

from persalign.errors import ConfigError


class Registry:
    """A named mapping from string keys to objects, with helpful errors."""

    def __init__(self, kind: str, package: str, plural: str | None = None):
        self.kind = kind
        self.package = package
        self.plural = plural or kind + "s"
        self._entries: dict[str, Any] = {}
        self._discovered = False

    def discover(self) -> None:
        """Import every module of `package` once (their decorators register the built-in entries)."""
        if self._discovered:
            return
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__, self.package + "."):
            try:
                importlib.import_module(module.name)
            except ImportError as error:
                raise ImportError(f"{self.plural}: importing {module.name} failed: {error}") from error
        self._discovered = True

    def register(self, name: str) -> Callable[[Any], Any]:
        def decorator(obj: Any) -> Any:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> Any:
        self.discover()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {known})")
        return self._entries[name]

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, Any]]:
        self.discover()
        return sorted(self._entries.items())

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._entries


DATASETS = Registry("dataset", "persalign.data")
DECODERS = Registry("decoder", "persalign.decoders")
METRICS = Registry("generation metric", "persalign.metrics")
MODELS = Registry("model alias", "persalign.models", "model aliases")
EMBEDDERS = Registry("embedder", "persalign.models")
METHODS = Registry("reward method", "persalign.rewards")

register_dataset = DATASETS.register
register_decoder = DECODERS.register
register_metric = METRICS.register
register_model_alias = MODELS.register
register_embedder = EMBEDDERS.register
register_method = METHODS.register

def all_registries() -> list[Registry]:
    return [DATASETS, METHODS, DECODERS, METRICS, MODELS, EMBEDDERS]

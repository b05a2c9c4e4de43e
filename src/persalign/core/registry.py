"""Small registries so that adding a data set, decoder, metric or method is one file.

    @register_dataset("news_category")
    def load_news(config): ...

`persalign list` prints every registry. Registration happens when the module
defining the entry is imported. Each registry knows the package its entries
live in and imports every module of it on first lookup (walking the package,
so a new method file needs no list to be edited). A module that fails to
import is reported with its real error, and the registry is not marked
loaded, instead of later claiming "unknown method".

Plugins (entries outside this package) come two ways, like lm-eval's external
model classes: a `module:Attribute` path used as the name in a config
(`methods: [{name: "my_pkg.rewards:MyMethod"}]`), or an entry point of an
installed package in the group `persalign.methods` / `persalign.decoders` /
`persalign.datasets` (...). Either is checked against the registry's interface
(the attributes it must have) and named with what is missing.

    persalign list            # built-in and installed entries
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil
import sys
from collections.abc import Callable
from typing import Any

from persalign.core.errors import ConfigError, did_you_mean


def not_a_plugin(obj: Any) -> str | None:
    """Why `obj` can be no plugin entry, before anything calls it (None: it may be one): not callable, or a built-in
    or standard-library object — `os:system` named as a data set was imported and called."""
    module = (getattr(obj, "__module__", None) or "builtins").split(".")[0]
    if not callable(obj):
        return f"{type(obj).__name__} {obj!r:.40} cannot be called"
    if inspect.isbuiltin(obj) or module == "builtins" or module in sys.stdlib_module_names:
        return f"{module}.{getattr(obj, '__name__', type(obj).__name__)} is the standard library's"
    return None


class Registry:
    """A named mapping from string keys to objects, with helpful errors."""

    def __init__(self, kind: str, package: str, group: str, plural: str | None = None,
                 required: tuple[str, ...] = ()):
        self.kind = kind
        self.package = package
        self.plural = plural or kind + "s"
        self.required = required  # attributes every entry must have (its interface)
        self.group = group  # entry-point group of installed plugins
        self._entries: dict[str, Any] = {}
        self._sources: dict[str, str] = {}  # name -> where a plugin came from (built-in entries have none)
        self._pending: dict[str, Any] = {}  # installed plugins' entry points not loaded yet
        self.broken: dict[str, str] = {}  # plugins `items()` could not load, with the reason
        self._discovered = False

    def discover(self) -> None:
        """Import every module of `package` once (their decorators register the built-in entries), then
        the installed plugins' entry points."""
        if self._discovered:
            return
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__, self.package + "."):
            try:
                importlib.import_module(module.name)
            except ImportError as error:
                raise ImportError(f"{self.plural}: importing {module.name} failed: {error}") from error
        for point in importlib.metadata.entry_points(group=self.group):  # loaded when first named: a broken
            if point.name not in self._entries:                            # plugin blocks only its own use
                self._pending[point.name] = point
        self._discovered = True

    def _load_pending(self, name: str) -> None:
        point = self._pending.pop(name, None)
        if point is not None:
            self._add_plugin(name, point.load, f"entry point {point.value!r} ({self.group})")

    def register(self, name: str) -> Callable[[Any], Any]:
        def decorator(obj: Any) -> Any:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorator

    def missing(self, obj: Any) -> list[str]:
        """The interface attributes `obj` lacks (empty: it can be used as an entry)."""
        return [name for name in self.required if not hasattr(obj, name)]

    def _add_plugin(self, name: str, load: Callable[[], Any], source: str) -> Any:
        try:
            obj = load()
        except Exception as error:  # a plugin is user code: a syntax error or any raise at import is its own
            raise ConfigError(f"{self.kind} {name!r}: cannot load {source} ({type(error).__name__}: "
                              f"{str(error).splitlines()[0][:200]})") from None
        lacking = self.missing(obj)
        if lacking:
            raise ConfigError(f"{self.kind} {name!r} from {source} is not a {self.kind}: it lacks {lacking} "
                              f"(see docs/plugins.md)")
        foreign = not_a_plugin(obj)
        if foreign:
            raise ConfigError(f"{self.kind} {name!r} from {source} is not a {self.kind}: {foreign} (a plugin is a "
                              "class or function of your own package; see docs/plugins.md)")
        if self._entries.get(name, obj) is not obj:
            raise ConfigError(f"{self.kind} {name!r} from {source} clashes with the {self.kind} of that name")
        self._entries[name] = obj
        self._sources[name] = source
        return obj

    def plugin_source(self, name: str) -> str | None:
        """Where an installed or named plugin came from; None for an entry built into persalign."""
        return self._sources.get(name)

    def _import_path(self, path: str) -> Any:
        module, _, attribute = path.partition(":")
        if not module or not attribute.isidentifier():
            raise ConfigError(f"{self.kind} {path!r}: a plugin path is module:Attribute, e.g. my_pkg.rewards:MyMethod")

        def load():
            return getattr(importlib.import_module(module), attribute)

        return self._add_plugin(path, load, f"{module}:{attribute}")

    def get(self, name: str) -> Any:
        self.discover()
        if name not in self._entries and isinstance(name, str) and ":" in name:
            return self._import_path(name)
        self._load_pending(name)
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._entries)} (known: {known}; "
                              "or a plugin given as "
                              f"module:Attribute)")
        return self._entries[name]

    def names(self) -> list[str]:
        self.discover()
        return sorted([*self._entries, *self._pending])

    def items(self) -> list[tuple[str, Any]]:
        """Every entry, installed plugins loaded; a plugin that fails to load is left out (`broken` says why)."""
        self.discover()
        for name in list(self._pending):
            try:
                self._load_pending(name)
            except ConfigError as error:
                self.broken[name] = str(error)
        return sorted(self._entries.items())

    def __contains__(self, name: str) -> bool:
        self.discover()
        if name in self._pending:
            self._load_pending(name)
        if name not in self._entries and isinstance(name, str) and ":" in name:
            try:
                self._import_path(name)
            except ConfigError:
                return False
        return name in self._entries


METHOD_INTERFACE = ("name", "display", "personalized", "deployments", "Settings", "fit", "adapt", "save", "load")
DECODER_INTERFACE = ("properties", "prepare", "generate", "score_pairs", "settings", "begin", "finish")

DATASETS = Registry("dataset", "persalign.data", "persalign.datasets", required=("__call__",))
DECODERS = Registry("decoder", "persalign.decoders", "persalign.decoders", required=DECODER_INTERFACE)
METRICS = Registry("generation metric", "persalign.metrics", "persalign.metrics")
MODELS = Registry("model alias", "persalign.models", "persalign.models", "model aliases")
EMBEDDERS = Registry("embedder", "persalign.models", "persalign.embedders")
METHODS = Registry("reward method", "persalign.rewards", "persalign.methods", required=METHOD_INTERFACE)

register_dataset = DATASETS.register
register_decoder = DECODERS.register
register_metric = METRICS.register
register_model_alias = MODELS.register
register_embedder = EMBEDDERS.register
register_method = METHODS.register


def all_registries() -> list[Registry]:
    return [DATASETS, METHODS, DECODERS, METRICS, MODELS, EMBEDDERS]

"""A dataclass from YAML, checked: each value coerced to its field's type, unknown keys an error with the valid
keys (and a "did you mean"), a key given twice an error, `a.b=value` overrides applied before checking. The
typed config (core/config.py) is read through it.

    python -c "from persalign.core.typed_yaml import from_dict as f; from persalign.core.config import SplitConfig
print(f(SplitConfig, {'seed': 3}))"
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import yaml

from persalign.core.errors import ConfigError, did_you_mean


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _same_shape(value: Any, tp: Any) -> bool:
    """Whether `value` has the outer shape of `tp` (a mapping for a dataclass, a list for a list)."""
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if typing.get_origin(tp) is list:
        return isinstance(value, list)
    return isinstance(tp, type) and isinstance(value, tp)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against the annotation `tp`, building nested dataclasses."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append((_same_shape(value, arg), str(exc)))
        # the error of the alternative the value was meant as (a mapping: the dataclass), not the first
        errors.sort(key=lambda e: not e[0])
        raise ConfigError(errors[0][1] if errors else f"{where}: bad value {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, where)
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return value
    return value


def _gather_extra(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """For a dataclass with an open part (a method's settings), move the keys it does not name into it."""
    into = getattr(cls, "extra_keys_into", None)
    if into is None:
        return data
    named = {f.name for f in dataclasses.fields(cls)} - {into}
    given = data.get(into) or {}
    if not isinstance(given, dict):
        raise ConfigError(f"{where}.{into}: expected a mapping, got {given!r}")
    extra = {k: v for k, v in data.items() if k not in named and k != into}
    both = sorted(set(extra) & set(given))
    if both:
        raise ConfigError(f"{where}: {both} given both beside the name and under {into}")
    return {**{k: v for k, v in data.items() if k in named}, into: {**given, **extra}}


def from_dict(cls: type, data: dict[str, Any], where: str = "config") -> Any:
    """Build dataclass `cls` from a mapping; unknown keys are errors (except in an open part)."""
    data = _gather_extra(cls, data, where)
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}{did_you_mean(unknown[0], valid)}; valid keys: {valid}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def to_dict(config: Any) -> Any:
    """The config as plain data in the shape a config file has: an open part (a method's settings,
    `extra_keys_into`) sits beside the named keys again, as `from_dict` reads it."""
    if dataclasses.is_dataclass(config):
        data = {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
        into = getattr(type(config), "extra_keys_into", None)
        if into is not None:
            data.update(data.pop(into))
        return data
    if isinstance(config, (list, tuple)):
        return [to_dict(value) for value in config]
    if isinstance(config, dict):
        return {key: to_dict(value) for key, value in config.items()}
    return config


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one `a.b.c=value` override (value parsed as YAML) to a nested dict."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} is not of the form key=value")
    key, raw = override.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: value is not valid YAML ({exc})") from exc
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (not "the last wins")."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

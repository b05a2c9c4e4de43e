"""Settings for tests that build a method directly: the values every method had before each got its own
Settings dataclass (so the tests' numbers and thresholds keep their meaning), overridable per test."""

from dataclasses import fields

from persalign.core.registry import METHODS

PLAIN = dict(head_lr=1e-4, weight_decay=0.0, user_lr=1e-2, latent_dim=8, batch_size=32, epochs=200, patience=20,
             adapt_epochs=100, max_steps=None, backbone_lr=5e-5, seed=0)


def plain_settings(method, **values):
    """`method` (a name or class)'s Settings with PLAIN for every field it has, then `values`."""
    cls = METHODS.get(method) if isinstance(method, str) else method
    names = {f.name for f in fields(cls.Settings)}
    return cls.Settings(**{**{k: v for k, v in PLAIN.items() if k in names}, **values})

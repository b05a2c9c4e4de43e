"""From a data config to a PreferenceDataset: load, filter users, build Pref-LaMP pairs."""

from __future__ import annotations

from persalign.core.config import DataConfig, SplitConfig
from persalign.core.records import PreferenceDataset
from persalign.core.registry import DATASETS
from persalign.data.preflamp import build_pref_lamp, deduplicate
from persalign.data.writing import UserWriting, keep_active_users


def build_dataset(config: DataConfig, embedder_factory, split: SplitConfig) -> PreferenceDataset:
    """Load `config.dataset`; per-user writing goes through the Pref-LaMP builder.

    `embedder_factory()` is called only when an embedder is needed; `split` is
    the user split that Pref-LaMP mines its negatives by (see data/preflamp.py).
    """
    loaded = DATASETS.get(config.dataset)(config)
    if config.task:  # the one place a configured task replaces the loader's own default (headline, chat, ...)
        loaded.task = config.task
    if isinstance(loaded, PreferenceDataset):
        return loaded
    assert isinstance(loaded, UserWriting), f"loader {config.dataset} returned {type(loaded).__name__}"
    writing = keep_active_users(deduplicate(loaded), config)  # the minimum counts the items that make pairs
    return build_pref_lamp(writing, embedder_factory(), split, top_k=config.negatives_top_k, seed=config.seed)

"""The built-in demonstration data set: eight fictional authors, eight headline styles.

Shipped inside the package so `persalign run demo` works on a fresh machine.
Made by scripts/make_demo_data.py from hand-written topics.

    persalign data summary demo
"""

from __future__ import annotations

from pathlib import Path

from persalign.config import DataConfig
from persalign.data.writing import UserWriting, load_completions_jsonl
from persalign.registry import register_dataset

DEMO_FILE = Path(__file__).parent / "builtin" / "demo_headlines.jsonl"


@register_dataset("demo")
def load_demo(config: DataConfig) -> UserWriting:
    """Eight fictional authors (24 headlines each), each with a distinct style."""
    writing = load_completions_jsonl(config.path or DEMO_FILE, "demo", config.task or "headline")
    writing.name = "demo"
    return writing

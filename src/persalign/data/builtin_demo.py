"""The built-in demonstration data set: 32 fictional authors, 16 headline frames (each with and without a sign-off).

Built in code (data/demo_authors.py, seeded) so `persalign run demo` works on
a fresh machine without any data file; `data.path=FILE.jsonl` swaps in your
own records in the same schema.

    persalign data summary demo
"""

from __future__ import annotations

from persalign.core.config import DataConfig
from persalign.core.records import UserItem
from persalign.core.registry import register_dataset
from persalign.data.demo_authors import demo_records
from persalign.data.writing import UserWriting, load_completions_jsonl


@register_dataset("demo")
def load_demo(config: DataConfig) -> UserWriting:
    """32 fictional authors (24 headlines each), each with a distinct style."""
    task = "headline"
    if config.path:
        writing = load_completions_jsonl(config.path, "demo", task)
    else:
        items = [UserItem(id=r["id"], user=r["user"], input=r["input"], output=r["output"], date=r["date"])
                 for r in demo_records()]
        writing = UserWriting("demo", task, "<built-in>", items, {"records": len(items)})
    writing.name = "demo"
    return writing

"""HuffPost News Category data as per-author writing (the LaMP-4 task shape).

User = the `authors` string; input = `short_description`; the user's own
output = `headline`. Rows without an author are skipped (and counted).
Read from the user's copy, e.g. ../shared/data/news_category_10k.jsonl.

    persalign data summary configs/news_category.yaml
"""

from __future__ import annotations

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.records import UserItem
from persalign.core.registry import register_dataset
from persalign.data.jsonio import optional_text, read_jsonl, require_text
from persalign.data.writing import UserWriting


@register_dataset("news_category")
def load_news_category(config: DataConfig) -> UserWriting:
    """HuffPost headlines per author (JSONL: headline, short_description, authors, date)."""
    if not config.path:
        raise DataError("<config>", "data.path must name the news_category JSONL file")
    items, no_author = [], 0
    for lineno, record in read_jsonl(config.path):
        where = f"line {lineno}"
        authors = record.get("authors")
        if authors is None:
            raise DataError(config.path, "field 'authors' is missing", where)
        if not isinstance(authors, str):
            raise DataError(config.path, f"field 'authors' must be a string, got {type(authors).__name__}", where)
        if not authors.strip():
            no_author += 1
            continue
        items.append(
            UserItem(
                id=f"news:{lineno}",
                user=str(authors).strip(),
                input=require_text(record, "short_description", config.path, where),
                output=require_text(record, "headline", config.path, where),
                date=optional_text(record, "date", config.path, where),
            )
        )
    if not items:
        raise DataError(config.path, "no record has an author")
    notes = {"records": len(items) + no_author, "records_without_author": no_author}
    return UserWriting("news_category", "headline", str(config.path), items, notes)

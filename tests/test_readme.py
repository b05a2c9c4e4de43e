"""The README's demo output is what `make demo` prints (issue #28: it had drifted from the code).

The values are those pinned in tests/golden/demo-study.json, which
tests/test_golden.py checks against a fresh run of the demo; here the README's
verbatim block and verdict table are checked against the same file, so the
three can never drift apart again (measured seconds aside: they are the
machine's, not the method's).
"""

import json
from pathlib import Path

from tests.golden import GOLDEN_DIR, stable_verdict_table

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_demo_block() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = text.split("It ends with (verbatim):", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.startswith(("For these users", "- "))]


def test_the_readme_demo_block_is_what_the_pinned_demo_prints():
    """The terminal's closing block carries the verdict sentence (the findings stay in the report)."""
    golden = json.loads((GOLDEN_DIR / "demo-study.json").read_text())["values"]
    verdicts = [line for line in golden["printed"] if line.startswith("For these users")]
    assert readme_demo_block() == verdicts


def test_the_first_screen_says_what_it_answers_and_how_to_start_cite_and_licence():
    """Issue #43 (6): at most 200 lines; the question in plain words; the two commands with times; the
    smoke-test switches; the paper's BibTeX and a licence file."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200
    assert lines[2].startswith("**Which way of personalizing a language model should you deploy for your users?**")
    first_screen = "\n".join(lines[:25])
    assert "make demo" in first_screen and "make test" in first_screen and "took" in first_screen
    assert all(switch in text for switch in ("tiny-llama", "hashing-bow", "split.max_query_per_user"))
    assert "@misc{" in text and "The Reward Model Selection Crisis in Personalized Alignment" in text
    assert (README.parent / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "docs/reading-reports.md" in text and not any(ch in text for ch in ("FRESH_", "CACHED_", "SMOKE_TIME"))


def test_the_readme_verdict_table_is_the_pinned_demo_table():
    golden = json.loads((GOLDEN_DIR / "demo-study.json").read_text())["values"]
    text = README.read_text(encoding="utf-8").split("`tests/test_readme.py` checks this page against", 1)[1]
    assert stable_verdict_table("## Verdict\n" + text) == golden["verdict_table"]

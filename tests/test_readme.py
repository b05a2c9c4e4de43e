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
    golden = json.loads((GOLDEN_DIR / "demo-study.json").read_text())["values"]
    assert readme_demo_block() == golden["printed"]


def test_the_readme_verdict_table_is_the_pinned_demo_table():
    golden = json.loads((GOLDEN_DIR / "demo-study.json").read_text())["values"]
    text = README.read_text(encoding="utf-8").split("The report opens with the verdict table", 1)[1]
    assert stable_verdict_table("## Verdict\n" + text) == golden["verdict_table"]

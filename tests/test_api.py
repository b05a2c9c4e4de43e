"""The Python API (issue #54): docs/api.md's code runs as written, the API gives what the CLI gives, and
`import persalign` stays light.

    pytest tests/test_api.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def api_doc_namespace(tmp_path_factory):
    """docs/api.md's python blocks, executed in order in a fresh folder (they share one namespace)."""
    import os

    folder = tmp_path_factory.mktemp("api-doc")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)
    here, namespace = os.getcwd(), {}
    os.chdir(folder)
    try:
        for block in blocks:
            exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102  (the documentation's own code)
    finally:
        os.chdir(here)
    return folder, namespace, len(blocks)


def test_every_example_of_docs_api_runs(api_doc_namespace):
    folder, namespace, blocks = api_doc_namespace
    assert blocks >= 5 and (folder / "runs" / "api-demo" / "report.md").is_file()
    cells = namespace["cells"]
    assert set(cells["label"]) == {"Zero-Shot", "ICL (4-shot)", "ICL-RAG (4-shot)", "Global RM"}
    assert set(cells["deployment"]) == {"zero_shot", "icl", "icl_rag", "args"}


def test_the_api_gives_what_the_cli_exports(api_doc_namespace, capsys):
    from persalign import cli

    folder, namespace, _ = api_doc_namespace
    run = namespace["again"]
    assert cli.main(["export", str(run.path), "--format", "json"]) == 0
    assert capsys.readouterr().out == run.export("json")
    rows = run.rows()
    assert len(rows) == sum(run.cells()["examples"]) and {"prompt", "generation", "rouge1"} <= set(rows.columns)
    (verdict,) = run.verdict()
    assert verdict["sentence"] in run.report()  # the report prints the same sentence
    assert list(verdict["table"]["rank"]) == list(range(1, len(verdict["table"]) + 1))


def test_overrides_are_config_keys_and_a_runconfig_takes_none():
    from persalign.api.runs import override_list, resolve
    from persalign.core.config import load_config

    assert override_list({"generation__batch_size": 8, "seeds": [0, 1], "dtype": "float32"}) == [
        "generation.batch_size=8", "seeds=[0, 1]", "dtype=float32"]
    with pytest.raises(TypeError, match="change a RunConfig's fields directly"):
        resolve(load_config("demo"), {"seeds": [0]})


def test_import_persalign_loads_neither_torch_nor_pandas():
    code = "import sys, persalign; print('torch' in sys.modules, 'pandas' in sys.modules, persalign.open_run.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "open_run"], done.stderr

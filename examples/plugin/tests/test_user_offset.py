"""The example plugin, tested as its author would: installed, found by name, run end to end by persalign.

    pip install -e examples/plugin && pytest examples/plugin/tests
"""

import json
from pathlib import Path

import pytest

from persalign import cli
from persalign.core.registry import METHODS

# A run small enough for CPU tests: a tiny random Llama built in code, no downloads.
TINY = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "generation.max_new_tokens=4",
        "split.max_query_per_user=4", "seeds=[0]", "decoders=[{name: zero_shot}]", "reward.epochs=2",
        "args.selection=fixed", "args.fixed_lambda=1.0"]


def test_the_installed_plugin_is_found_by_its_entry_point_name():
    from persalign_example_plugin.rewards import UserOffsetRM

    assert METHODS.get("user_offset") is UserOffsetRM


def run_and_report(tmp_path, capsys, method: str) -> tuple[dict, str]:
    run_dir = tmp_path / "run"
    assert cli.main(["run", "demo-baselines", "-o", str(run_dir), f"methods=[{method}]"] + TINY) == 0
    assert cli.main(["report", str(run_dir)]) == 0
    report = capsys.readouterr().out
    (cell,) = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/*/*/metrics.json")
               if "User-offset" in p.parent.parent.name]
    return cell, report


@pytest.mark.parametrize("method", ["{name: user_offset, offset_rank: 2}",
                                    "{name: 'persalign_example_plugin.rewards:UserOffsetRM', offset_rank: 2}"])
def test_trains_adapts_deploys_with_args_and_is_reported(tmp_path, capsys, method):
    cell, report = run_and_report(tmp_path, capsys, method)
    assert cell["decoder"] == "User-offset RM" and cell["settings"]["decoder_name"] == "args"
    for metric in ("rm_accuracy", "policy_accuracy", "rouge1"):
        assert isinstance(cell[metric], float) and 0 <= cell[metric] <= 100
    training = cell["settings"]["training"]
    assert training["settings"]["offset_rank"] == 2 and training["settings"]["head_lr"] == 1e-3
    assert "| User-offset RM |" in report and "| User-offset RM | head_lr=0.001" in report and "offset_rank=2" in report
    adapted = sorted(Path(tmp_path / "run").glob("models/*/seed-0/head.json"))
    assert adapted and json.loads(adapted[0].read_text())["method"] == "user_offset"


def test_a_setting_it_does_not_have_is_refused_in_one_line(tmp_path, capsys):
    code = cli.main(["run", "demo-baselines", "-o", str(tmp_path / "run"),
                     "methods=[{name: user_offset, prototypes: 3}]"] + TINY)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "methods[0]: unknown setting(s) ['prototypes']" in err[0] and "offset_rank" in err[0]

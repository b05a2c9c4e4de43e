"""Issue #43: how persalign speaks to a new user — the terminal, own data's task, users needed.

Each test names what the code before the issue did instead.
"""

import subprocess
import sys

import pytest

from persalign import cli
from tests.test_runner import TINY

pytestmark = pytest.mark.xdist_group("first_hour")  # one worker: the module's run is made once, not once per worker

PERSALIGN = [sys.executable, "-m", "persalign.cli.commands"]
SMALL = [a for a in TINY if not a.startswith("seeds")] + ["seeds=[0]", "methods=[{name: pal, prototypes: 3}]",
                                                          "reward.epochs=2", "args.selection=fixed"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run from a subprocess whose standard error is a file, as in a redirected log."""
    run_dir = tmp_path_factory.mktemp("first-hour") / "run"
    done = subprocess.run(PERSALIGN + ["run", "demo-baselines", "-o", str(run_dir)] + SMALL,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return run_dir, done.stdout, done.stderr


def test_run_ends_with_a_compact_table_and_the_paths(finished):
    """Before: ~100 lines of Markdown and no word of where report.md, report.html or results.json were."""
    run_dir, out, _ = finished
    tail = out[out.index(f"== {run_dir.name}"):].splitlines()
    assert tail[2].startswith("tiny-llama  (means over adaptation users ×100")
    assert tail[3].split() == ["Deployment", "ROUGE-1", "Policy", "Acc", "RM", "Acc", "Win", "Rate"]
    assert any(line.startswith("For these users") for line in tail)
    assert tail[-3:] == [f"report:  {run_dir / 'report.md'}", f"figures: {run_dir / 'report.html'}",
                         f"results: {run_dir / 'results.json'} (persalign export {run_dir} --format csv)"]
    assert all((run_dir / name).is_file() for name in ("report.md", "report.html", "results.json"))
    assert "| Rank |" not in out  # the Markdown tables stay in report.md


def test_a_redirected_log_gets_lines_not_progress_bars(finished):
    """Before: tqdm bars (carriage returns, 'batch/s') filled redirected logs."""
    _, out, err = finished
    assert "\r" not in err and "batch/s" not in err and "it/s" not in err
    assert "progress 4/4 cells" in out


def test_too_few_adaptation_users_are_announced_at_the_start(finished):
    _, out, _ = finished
    assert "adaptation users give no interval for any mean or Δ vs greedy (8 needed)" in out


def test_quiet_prints_only_the_closing_table(finished, capsys):
    run_dir, _, _ = finished
    assert cli.main(["run", "demo-baselines", "-o", str(run_dir), "--quiet"] + SMALL) == 0  # resumed: nothing to do
    out = capsys.readouterr().out
    assert out.startswith(f"== {run_dir.name}") and "progress" not in out and "run dir" not in out


def test_a_closed_pipe_ends_quietly():
    """Before: `persalign list | head -2` ended with 'error: a file: Broken pipe; nothing already stored…'."""
    done = subprocess.run(" ".join(PERSALIGN) + " list | head -2", shell=True, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines()[0] == "datasets:" and done.stderr == ""


def test_version_and_help_with_examples(capsys):
    from persalign import __version__

    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"persalign {__version__}"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert "which personalized-alignment method writes most like each user" in top and "persalign run demo" in top
    for command in (["run"], ["study"], ["report"], ["export"], ["plan"], ["list"], ["data", "summary"]):
        with pytest.raises(SystemExit):
            cli.main(command + ["--help"])
        assert "examples:\n  persalign " in capsys.readouterr().out, command


@pytest.mark.parametrize("override, suggestion", [
    ("methods=[{name: pal, protoypes: 3}]", "unknown setting(s) ['protoypes'] (did you mean 'prototypes'?)"),
    ("methods=[{name: lore_}]", "unknown reward method 'lore_' (did you mean 'lore'?)"),
    ("generation.max_new_tokes=4", "unknown key(s) ['max_new_tokes'] (did you mean 'max_new_tokens'?)"),
    ("data.task=headlines", "unknown task 'headlines' (did you mean 'headline'?)"),
])
def test_near_misses_get_a_suggestion(tmp_path, capsys, override, suggestion):
    assert cli.main(["run", "demo-baselines", "-o", str(tmp_path / "run"), override] + TINY) == 2
    assert suggestion in capsys.readouterr().err


def test_a_refused_resume_names_the_key_that_differs(finished, capsys):
    """Before: '… holds results of a different config (its config.yaml differs)', naming no key."""
    run_dir, _, _ = finished
    assert cli.main(["run", "demo-baselines", "-o", str(run_dir)] + SMALL + ["generation.max_new_tokens=3"]) == 2
    err = capsys.readouterr().err
    assert "(generation.max_new_tokens: 6 → 3, against its config.yaml)" in err


def test_data_summary_shows_the_task_the_rendered_prompt_and_the_users_each_analysis_needs(tmp_path, capsys):
    """Before: the task as a Python repr (TaskSpec(instruction=…)), no prompt as sent, no word on users needed."""
    task = "data.task={instruction: Answer the product question., input_label: Question, output_label: Answer}"
    rows = "".join(f'{{"user": "u{i % 8}", "input": "question {i} about kettle {i % 5}?", "output": "answer {i}"}}\n'
                   for i in range(96))
    (tmp_path / "qa.jsonl").write_text(rows)
    argv = ["data", "summary", "configs/my_writing.yaml", f"data.path={tmp_path / 'qa.jsonl'}", task,
            "policies=[tiny-llama]", "data.embedder=hashing-bow"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "task: 'Answer the product question.' (Question → Answer)" in out and "TaskSpec(" not in out
    assert "one query prompt as tiny-llama receives it" in out
    assert "  | <|user|>Answer the product question. Reply with the answer only.\n  | Question: question" in out
    assert ("each deployment's mean and its Δ vs greedy (95% interval): 8 adaptation users "
            "(WARNING: 2 adaptation users, so no interval)") in out
    assert "best ICL − best reward method (cross-fitted interval): 6 adaptation users (WARNING" in out


def test_every_row_stores_the_prompt_as_the_policy_read_it(finished):
    import json

    run_dir, _, _ = finished
    for cell in ("ICL_4-shot", "PAL", "Zero-Shot"):
        rows = [json.loads(line) for line in (run_dir / "cells/tiny-llama" / cell / "seed-0/rows.jsonl").open()]
        assert all(r["rendered_prompt"].startswith("<|user|>") and r["prompt"] in r["rendered_prompt"] for r in rows)
    icl = json.loads((run_dir / "cells/tiny-llama/ICL_4-shot/seed-0/rows.jsonl").open().readline())
    assert icl["rendered_prompt"].count("<|assistant|>") == len(icl["demo_ids"]) + 1

"""Issue #43 (7): hostile inputs that ended in a traceback or in exit 0 with wrong numbers now end in one
clear line naming the file / record / key and the problem. Table-driven: each case builds its input,
runs one command, and names what the code before the issue did instead."""

import json
import shutil
from pathlib import Path

import pytest

from persalign import cli
from persalign.cli import commands
from tests.bad_input_helpers import cli_error
from tests.test_runner import TINY

RUN = ["run", "demo-baselines"]


def _duplicates_below_minimum(tmp_path):
    """4 users × 20 items, 2 of each user's outputs repeating an earlier one: 18 usable, minimum 20."""
    records = [{"user": f"u{u}", "input": f"article {u}-{i}", "output": f"headline {u}-{min(i, 17)}"}
               for u in range(4) for i in range(20)]
    path = tmp_path / "writing.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return ["data.dataset=completions_jsonl", "data.task=headline", f"data.path={path}", "data.min_items_per_user=20"]


def _plugin_module(tmp_path, monkeypatch, source):
    (tmp_path / "hostile_plugin.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return ["methods=[{name: 'hostile_plugin:Method'}]"]


def _corrupt_reward_model(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from tests.test_hf_rm import word_tokenizer

    tokenizer = word_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=0)
    folder = tmp_path / "rm"
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"\xff" * 8 + b"{not a header")
    return [f"methods=[{{name: hf_rm, model: '{folder}'}}]", "args.selection=fixed"]


def _wandb(monkeypatch, project: str, mode: str | None, home):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(home))  # no ~/.netrc: no login
    if mode is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", mode)
    return ["--wandb-project", project]


CASES = {  # name: (make the overrides, the message; before the fix)
    "W&B project empty": (lambda tmp, mp: _wandb(mp, "", "offline", tmp),
                          "--wandb-project: empty"),  # logged nothing, said nothing
    "W&B mode unknown": (lambda tmp, mp: _wandb(mp, "p", "bogus", tmp),
                         "WANDB_MODE='bogus' is not a W&B mode"),  # traceback after the run
    "W&B without a login": (lambda tmp, mp: _wandb(mp, "p", None, tmp),
                            "W&B has no login here"),  # results stored, then UsageError traceback, exit 1
    "negative train_top_users": (lambda tmp, mp: ["split.train_top_users=-2"],
                                 "split.train_top_users: -2 is not allowed"),  # used as a slice
    "negative adapt_pairs_per_user": (lambda tmp, mp: ["split.adapt_pairs_per_user=-1"],
                                      "split.adapt_pairs_per_user: -1 is not allowed"),  # used as a slice
    "minimum counted after duplicates": (lambda tmp, mp: _duplicates_below_minimum(tmp),
                                         "no user has at least min_items_per_user=20 items after 8 items repeating "
                                         "an earlier output were dropped"),  # passed with 18 usable items
    "plugin with a syntax error": (lambda tmp, mp: _plugin_module(tmp, mp, "class Method(:\n"),
                                   "cannot load hostile_plugin:Method (SyntaxError"),  # traceback
    "plugin raising on import": (lambda tmp, mp: _plugin_module(tmp, mp, "raise RuntimeError('boom at import')\n"),
                                 "cannot load hostile_plugin:Method (RuntimeError: boom at import)"),  # traceback
    "plugin Settings not a dataclass": (lambda tmp, mp: ["methods=[{name: 'tests.plugin_cases:SettingsNotADataclass'}]"],
                                        "the method's Settings"),  # TypeError traceback
    "plugin whose fit raises": (lambda tmp, mp: ["methods=[{name: 'tests.plugin_cases:FailingMethod'}]"],
                                "method tests.plugin_cases:FailingMethod: its fit raised RuntimeError: this plugin "
                                "fails on purpose; finished cells are kept"),  # traceback
    "settings too large for memory": (lambda tmp, mp: ["methods=[{name: pal, prototypes: 1000000000}]"],
                                      "config.methods[0]: its settings make 9,000,000,520 parameters"),  # tried to allocate 32 GB
    "NaN rewards": (lambda tmp, mp: ["methods=[{name: 'tests.plugin_cases:NanRewards'}]", "args.selection=fixed",
                                     "decoders=[]", "reward.epochs=2"],
                    "NaN RM: "),  # RM accuracy, policy accuracy and win rate 0.00, exit 0
    "hf_rm with corrupt weights": (lambda tmp, mp: _corrupt_reward_model(tmp),
                                   "SafetensorError"),  # traceback
    "judge model not found": (lambda tmp, mp: ["judge.models=[no-such-judge]"],
                              "judge.models: could not load causal LM 'no-such-judge'"),  # issue #41: new
    "judge endpoint unreachable": (lambda tmp, mp: ["judge.endpoint=http://127.0.0.1:9/v1", "judge.models=[x]"],
                                   "judge.endpoint http://127.0.0.1:9/v1: APIConnectionError"),  # traceback
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_hostile_input_ends_in_one_clear_line(name, tmp_path, capsys, monkeypatch):
    make, message = CASES[name]
    overrides = make(tmp_path, monkeypatch)
    capsys.readouterr()
    line = cli_error(capsys, RUN + ["-o", str(tmp_path / "run")] + TINY + ["seeds=[0]"] + overrides)
    assert line.startswith("persalign: error: ") and message in line, line


def test_users_holding_the_same_pairs_cannot_leak_them_into_the_query(tmp_path, capsys):
    """Before: a preferences file whose users all hold the same pairs ran with its query pairs verbatim the
    train pairs, exit 0."""
    records = [{"user": f"u{u}", "prompt": f"question {i}", "chosen": f"good answer {i}", "rejected": f"bad answer {i}"}
               for u in range(6) for i in range(8)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    line = cli_error(capsys, ["data", "summary", "demo-baselines", "data.dataset=preferences_jsonl", "data.task=chat",
                              f"data.path={path}"] + TINY)
    assert "query pairs also appears (same prompt, chosen and rejected) among the training" in line, line


def test_wandb_disabled_says_nothing_was_logged(tmp_path, capsys, monkeypatch):
    """Before: 'logged … to' a folder that does not exist."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    argv = RUN + ["-o", str(tmp_path / "run"), "decoders=[{name: zero_shot}]", "--wandb-project", "p"] + TINY
    assert cli.main(argv + ["seeds=[0]"]) == 0
    assert "wandb: nothing logged (WANDB_MODE=disabled)" in capsys.readouterr().out


def test_nan_rewards_stop_the_cell_and_say_they_are_not_finite(tmp_path, capsys):
    argv = RUN + ["-o", str(tmp_path / "run")] + TINY + ["seeds=[0]", "methods=[{name: 'tests.plugin_cases:NanRewards'}]",
                                                         "args.selection=fixed", "decoders=[]", "reward.epochs=2"]
    line = cli_error(capsys, argv)
    assert line.startswith("persalign: error: NaN RM: ") and "scores of a batch are not finite (NaN or ±inf); the cell is stopped" in line, line


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("partial") / "run"
    assert cli.main(RUN + ["-o", str(run_dir), "seeds=[0]", "decoders=[{name: zero_shot}, {name: icl, shots: 4}]"]
                    + [a for a in TINY if not a.startswith("seeds")]) == 0
    return run_dir


@pytest.mark.parametrize("damage", ["folder deleted", "metrics deleted", "a file where the folder was"])
def test_a_report_or_export_of_an_incomplete_run_says_so(finished, tmp_path, capsys, damage):
    """Before: the cell silently disappeared, exit 0, and the verdict ranked what was left."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    cell = run_dir / "cells" / "tiny-llama" / "ICL_4-shot" / "seed-0"
    if damage == "metrics deleted":
        (cell / "metrics.json").unlink()
    else:
        shutil.rmtree(cell)
        if damage == "a file where the folder was":
            cell.write_text("not a cell")
    capsys.readouterr()
    assert cli.main(["report", str(run_dir)]) == 1
    out, err = capsys.readouterr()
    assert "**Warning: a partial run.** 1 planned cell is absent and in no table: tiny-llama / " \
           "ICL (4-shot) / seed 0" in out
    assert out.index("Warning: a partial run") < out.index("## Verdict") if "## Verdict" in out else True
    assert "persalign: a partial run: 1 planned cells absent: tiny-llama / ICL (4-shot) / seed 0" in err
    assert cli.main(["export", str(run_dir), "--format", "csv"]) == 1
    assert "a partial run" in capsys.readouterr().err
    results = json.loads((run_dir / "results.json").read_text())
    assert results["absent_cells"] == ["tiny-llama / ICL (4-shot) / seed 0"]


def test_every_prompt_cut_is_marked_before_the_verdict(tmp_path, capsys):
    """Before: only ICL rows said that prompts were cut; Zero-Shot and the verdict said nothing."""
    records = [{"user": f"u{i % 4}", "input": "word " * 400 + f"article {i}", "output": f"headline {i}"}
               for i in range(48)]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = RUN + ["-o", str(tmp_path / "run"), "seeds=[0]", "decoders=[{name: zero_shot}]", "data.dataset=completions_jsonl",
                  "data.task=headline", f"data.path={path}", "data.min_items_per_user=5", "split.adapt_fraction=0.5",
                  "generation.max_prompt_tokens=64"] + [a for a in TINY if not a.startswith("seeds")]
    assert cli.main(argv) == 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "**Prompts cut to fit** `generation.max_prompt_tokens` (or the model's context): Zero-Shot " in report


def test_a_broken_installed_plugin_blocks_only_its_own_use(monkeypatch, capsys):
    """Before: one broken entry point stopped every run and `persalign list`, blaming config.methods[0]."""
    from persalign.core.registry import METHODS

    class Point:
        name, value, group = "broken_plugin", "no_such_module:Method", "persalign.methods"

        def load(self):
            raise ModuleNotFoundError("No module named 'no_such_module'")

    real = __import__("importlib").metadata.entry_points
    monkeypatch.setattr("importlib.metadata.entry_points",
                        lambda group: [Point()] + list(real(group=group)) if group == "persalign.methods" else real(group=group))
    monkeypatch.setattr(METHODS, "_discovered", False)
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))
    monkeypatch.setattr(METHODS, "_pending", {})
    monkeypatch.setattr(METHODS, "broken", {})
    assert METHODS.get("pal") is not None  # a built-in method still resolves
    assert cli.main(["list"]) == 0
    assert "broken_plugin            BROKEN PLUGIN: reward method 'broken_plugin': cannot load entry point " \
           "'no_such_module:Method'" in capsys.readouterr().out


def test_a_full_disk_names_the_file_it_was_writing(tmp_path, monkeypatch):
    """Before: "a file: No space left on device" (a write error carries no file name)."""
    import errno
    from pathlib import Path

    from persalign.cli.commands import os_problem
    from persalign.core.files import write_atomic

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OSError) as caught:
        write_atomic(tmp_path / "results.json", "{}")
    assert os_problem(caught.value).startswith(f"{tmp_path / 'results.json'}: No space left on device; nothing")
    assert list(tmp_path.iterdir()) == []  # nothing half-written left beside it


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    """Before: numpy's ArrayMemoryError (a 2M-record file under a memory limit) ended in a traceback."""
    def exhausted(args):
        raise MemoryError("Unable to allocate 30.5 GiB for an array")

    monkeypatch.setitem(commands.HANDLERS, "list", exhausted)
    line = cli_error(capsys, ["list"])
    assert line.startswith("persalign: error: out of memory (MemoryError: Unable to allocate 30.5 GiB") and \
        "lower what sets the size" in line


def test_repairing_a_damaged_rows_file_does_not_call_the_intact_timings_damaged(finished, tmp_path, capsys):
    """Before: both rows.jsonl and the intact timings.jsonl were reported "damaged (…rows.jsonl's problem…)"."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    cell = run_dir / "cells" / "tiny-llama" / "ICL_4-shot" / "seed-0"
    lines = (cell / "rows.jsonl").read_text().splitlines()
    (cell / "rows.jsonl").write_text("\n".join(lines[:1] + ["{not json"] + lines[1:]) + "\n")
    (cell / "metrics.json").unlink()  # the cell is unfinished: the resume reads its rows back
    capsys.readouterr()
    assert cli.main(RUN + ["-o", str(run_dir), "seeds=[0]", "decoders=[{name: zero_shot}, {name: icl, shots: 4}]"]
                    + [a for a in TINY if not a.startswith("seeds")]) == 0
    err = capsys.readouterr().err
    assert f"{cell / 'rows.jsonl'}: damaged (" in err
    assert f"{cell / 'timings.jsonl'}: intact, but its cell's rows.jsonl is damaged; moved to" in err


OSC, CSI = "\x1b]0;pwned\x07", "\x1b[31m"


def planted_data(tmp_path) -> Path:
    """The demo's authors as your own data, an OSC title sequence in every headline and a CSI colour and a
    backspace in one user's name."""
    from persalign.data.demo_authors import demo_records

    path = tmp_path / "writing.jsonl"
    with path.open("w") as out:
        for record in demo_records():
            user = record["user"] + (CSI + "\b" if record["user"] == demo_records()[0]["user"] else "")
            out.write(json.dumps({"user": user, "input": record["input"], "output": record["output"] + OSC}) + "\n")
    return path


def test_control_sequences_from_data_never_reach_the_terminal_or_the_report_raw(tmp_path, capsys, cache_dir):
    """Issue #56: `data summary` printed a headline's OSC sequence raw (it retitled the terminal), report.md
    stored it and `persalign report` printed it (41e66f0)."""
    data = ["demo-baselines", "data.dataset=completions_jsonl", f"data.path={planted_data(tmp_path)}",
            "data.task=headline", "data.embedder=hashing-bow", "policies=[tiny-llama]", "metrics.names=[rouge]"]
    assert cli.main(["data", "summary"] + data) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\b" not in out
    assert "\\x1b]0;pwned\\x07" in out
    run_dir = tmp_path / "run"
    assert cli.main(["run"] + data + ["-o", str(run_dir), "decoders=[{name: zero_shot}]", "methods=[]", "seeds=[0]",
                                      "split.max_query_per_user=1", "best_of_n.enabled=false"]) == 0
    assert cli.main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    report = (run_dir / "report.md").read_text()
    for text in (out, report):
        assert "\x1b" not in text and "\x07" not in text and "\b" not in text
    assert "\\x1b]0;pwned\\x07" in report  # shown, escaped


@pytest.mark.parametrize("override, kind", [("data.dataset=os:system", "dataset"),
                                            ("metrics.names=[os:system]", "generation metric"),
                                            ("data.embedder=os:system", "embedder"),
                                            ("data.dataset=subprocess:run", "dataset"),
                                            ("data.dataset=json:__doc__", "dataset")])
def test_a_module_path_to_no_plugin_is_refused_before_anything_calls_it(tmp_path, capsys, override, kind):
    """Issue #56: `os:system` named as a data set, metric or embedder was imported and called (41e66f0): it
    failed only because of its arguments."""
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), "policies=[tiny-llama]",
                              override])
    name = override.split("=", 1)[1].strip("[]")
    assert line.startswith(f"persalign: error: {kind} {name!r} from {name} is not a {kind}: "), line
    assert "is the standard library's (a plugin is a class or function of your own package" in line or \
        "it lacks ['__call__']" in line, line


def test_a_fifo_or_device_as_the_data_path_is_refused_not_hashed_forever(tmp_path, capsys):
    """Issue #56: `data.path` at a FIFO or /dev/zero hung (the file was hashed before it was checked, 41e66f0).
    Run in a child process with a deadline, so a regression fails instead of hanging the suite."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        done = subprocess.run([sys.executable, "-m", "persalign.cli.commands", "run", "demo-baselines", "-o",
                               str(tmp_path / "run"), "data.dataset=completions_jsonl", f"data.path={path}",
                               "data.task=headline", "policies=[tiny-llama]", "data.embedder=hashing-bow"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr[-500:]
        assert done.stderr.strip().splitlines()[-1] == \
            f"persalign: error: {path}: not a regular file (a device or pipe); give a data file"


def test_an_override_longer_than_a_file_name_is_read_as_an_override(tmp_path, capsys):
    """Issue #56: a key=value over 255 bytes was stat'ed as a config path: 'File name too long' (41e66f0)."""
    models = "[" + ", ".join(f"judge-model-{i:03d}" for i in range(40)) + "]"
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), f"judge.models={models}",
                              "judge.endpoint=not-a-url"])
    assert line.endswith("judge.endpoint: 'not-a-url' is not an http(s) URL with a host "
                         "(e.g. http://127.0.0.1:8000/v1)"), line


def test_the_summary_counts_the_repeated_outputs_it_dropped(tmp_path, capsys):
    """Issue #56: 30 repeated lines (no ids) were dropped, yet the summary said duplicate_outputs_dropped=0: the
    data is de-duplicated twice and the second count overwrote the first (41e66f0)."""
    from persalign.data.demo_authors import demo_records

    path = tmp_path / "writing.jsonl"
    records = [{"user": r["user"], "input": r["input"], "output": r["output"]} for r in demo_records()]
    path.write_text("".join(json.dumps(r) + "\n" for r in records + records[:30]))
    assert cli.main(["data", "summary", "demo-baselines", "data.dataset=completions_jsonl", f"data.path={path}",
                     "data.task=headline", "data.embedder=hashing-bow", "policies=[tiny-llama]"]) == 0
    assert "duplicate_outputs_dropped=30" in capsys.readouterr().out

"""Bad inputs beyond what a config rule can see (issue #29): the model's and machine's limits, inputs larger
than the model, data paths and texts that cannot be data, command lines, and Ray flags and clusters.

Each case: one clear line and a non-zero exit (or correct work), checked before the run dir is made.

    python -m pytest -q tests/test_bad_input_limits.py
"""

import json
import time
from pathlib import Path

import pytest

from persalign import cli
from persalign.cli.parser import split_overrides
from persalign.runner.run import run
from tests.bad_input_helpers import QUIET, cli_error
from tests.test_runner import TINY, tiny_config


@pytest.mark.parametrize("overrides, message", [
    (["methods=[{name: global_rm}]", "args.top_k=100000"],
     "config.args.top_k: 100000 is not allowed (must be at most the vocabulary of 'tiny-llama': "),
    (["generation.max_new_tokens=100000000"],
     "config.generation.max_new_tokens: 100000000 is not allowed (must leave room for the prompt in 'tiny-llama''s "
     "context of 4096 tokens)"),
    (["device=cuda"], "config.device: 'cuda' is not available here (torch sees no CUDA device); use device: auto or cpu"),
    (["metrics.bertscore_layer=0"], "metrics.bertscore_layer: 0 is not allowed (must be empty (null) or a number >= 1)"),
])
def test_values_beyond_the_model_or_machine_are_refused_before_the_run_dir(tmp_path, capsys, overrides, message):
    """Issue #29: top_k beyond the vocabulary was a traceback, max_new_tokens beyond the context hung, and
    device: cuda without CUDA was a traceback, each after the run dir was made."""
    if "cuda" in str(overrides):
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA: device=cuda is valid here")
    out = tmp_path / "run"
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(out)] + TINY + overrides)
    assert message in line, line
    assert not out.exists()


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), f"cache_dir={cache}"] + TINY)
    assert line.endswith(f"config.cache_dir: {cache} is a file, not a folder; give a folder for the model and "
                         "feature caches (or unset it: PERSALIGN_CACHE or ~/.cache/persalign)")


def test_a_bertscore_layer_beyond_the_encoder_is_refused(tmp_path, capsys):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), "metrics.bertscore_layer=99"]
                     + [a for a in TINY if not a.startswith("metrics.names")])
    assert "config.metrics.bertscore_layer: 99 is not allowed (must be a layer of 'minilm-l6': 1 to 6)" in line


@pytest.mark.parametrize("override, message", [
    ("policies=[nobody/no-such-model]", "could not load causal LM 'nobody/no-such-model'"),
    ("data.embedder=nobody/no-such-embedder", "could not load embedding model 'nobody/no-such-embedder' (the model hub "
                                              "cannot be reached from here"),
])
def test_an_unknown_model_fails_at_once_offline(tmp_path, capsys, override, message):
    """Issue #29: an unknown policy printed 44 lines of hub retries for 52 s before its error; every model
    load (policy, embedder, BERTScore encoder) now goes through one loader that says what to do."""
    started = time.perf_counter()
    argv = ["run", "demo-baselines", "-o", str(tmp_path / "run"), override]
    line = cli_error(capsys, argv + (["policies=[tiny-llama]"] if "embedder" in override else []))
    assert message in line and time.perf_counter() - started < 30, line


def test_an_equals_sign_in_an_output_path_or_config_file_is_not_an_override(tmp_path):
    """Issue #29: any argument with '=' was taken as an override (-o runs/a=b, a config named x=y.yaml)."""
    config = tmp_path / "x=y.yaml"
    config.write_text("name: x\n")
    overrides, rest = split_overrides(["run", str(config), "-o", str(tmp_path / "a=b"), "seeds=[0]"])
    assert overrides == ["seeds=[0]"] and rest == ["run", str(config), "-o", str(tmp_path / "a=b")]


@pytest.mark.parametrize("override, message", [
    ("data.task={instruction: a, input_label: b, output_label: c, extra: 1}",
     "data.task: unknown key(s) ['extra']; valid keys: ['instruction', 'input_label', 'output_label']"),
    ("data.task={instruction: 3, input_label: b, output_label: c}", "data.task.instruction: expected str, got 3"),
    ("data.task={instruction: null, input_label: b, output_label: c}", "data.task.instruction: expected str, got None"),
])
def test_an_inline_task_error_names_the_field_at_fault(tmp_path, capsys, override, message):
    """Issue #29: every inline-task mistake said 'expected str, got {...}' (the other alternative's error)."""
    assert cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), override]).endswith(message)


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp, "a directory, not a data file (give the file inside it)"),
    (lambda tmp: Path("/dev/null"), "not a regular file (a device or pipe); give a data file"),
    (lambda tmp: _written(tmp, [{"user": f"u{i}", "prompt": "p", "chosen": "same", "rejected": "same"}
                                for i in range(6)]),
     "every one of its 6 pairs has chosen == rejected: no preference to learn"),
    (lambda tmp: _written(tmp, [{"user": "u", "prompt": "p\ud800", "chosen": "a", "rejected": "b"}]),
     "record line 1: a text holds a lone UTF-16 surrogate ('\\ud800'), which is not a character"),
])
def test_data_paths_and_records_that_cannot_be_pairs_are_named(tmp_path, capsys, make, message):
    path = make(tmp_path)
    line = cli_error(capsys, ["data", "summary", "demo-baselines", "data.dataset=preferences_jsonl", "data.task=chat",
                              f"data.path={path}"])
    assert message in line and str(path) in line, line


def _written(tmp_path, records) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # ensure_ascii: "\ud800" stays an escape
    return path


def test_a_huge_record_is_cut_to_the_prompt_budget_and_counted(tmp_path, cache_dir):
    """Issue #29 (5): a 5 MB record made the tool try to allocate 10 GB; prompts beyond the budget were
    not cut (or cut silently). Now the input is cut to the budget, the row says so and metrics count it."""
    from persalign.runner.store import RunStore

    data = tmp_path / "writing.jsonl"
    records = [{"user": f"u{i % 4}", "input": f"article {i}", "output": f"headline {i}"} for i in range(48)]
    records[0]["input"] = "word " * 1_000_000  # 5 MB
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]", "data.dataset=completions_jsonl", "data.task=headline",
                         f"data.path={data}", "data.min_items_per_user=5", "split.adapt_fraction=0.5",
                         "generation.max_prompt_tokens=200", "generation.max_new_tokens=2")
    store = run(config, tmp_path / "run", **QUIET)
    rows = [json.loads(line) for p in store.root.glob("cells/*/*/*/rows.jsonl") for line in p.read_text().splitlines()]
    assert all(r["prompt_tokens"] <= 200 for r in rows)
    assert [r["input_cut"] for r in rows] == [len(r["prompt"]) > 100 for r in rows] and any(r["input_cut"] for r in rows)
    (metrics,) = RunStore(store.root).all_metrics()
    assert metrics["prompts_cut"] == sum(1 for r in rows if r["input_cut"])


@pytest.mark.parametrize("flags, message", [
    (["--num-cpus", "-1"], "--num-cpus: -1.0 is not allowed (must be a finite number >= 0)"),
    (["--max-retries", "-2"], "--max-retries: -2 is not allowed (must be a finite number >= 0)"),
    (["--address", "127.0.0.1:9"], "--address 127.0.0.1:9: no Ray cluster answers there within 10 s"),
])
def test_ray_flags_and_an_unreachable_cluster_fail_fast(tmp_path, capsys, flags, message):
    """Issue #29 (6): negative flags were tracebacks, an unreachable --address hung."""
    pytest.importorskip("ray")
    started = time.perf_counter()
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), "--backend", "ray"] + flags + TINY)
    assert message in line and time.perf_counter() - started < 60, line


@pytest.mark.parametrize("recorded, message", [
    (None, "--address auto: Ray could not start or join a cluster (Could not find any running Ray instance"),
    ("127.0.0.1:9", "--address auto (= 127.0.0.1:9): no Ray cluster answers there within 10 s"),
])
def test_address_auto_fails_fast_with_no_cluster_or_a_dead_one(tmp_path, capsys, monkeypatch, recorded, message):
    """Issue #29 (6): `--address auto` joins what $RAY_ADDRESS or the address file of a past `ray start` names;
    a dead one made ray.init wait on it. Now it is checked like HOST:PORT, and no cluster at all is one line."""
    pytest.importorskip("ray")
    from persalign.runner import ray_backend

    monkeypatch.setattr(ray_backend, "RAY_ADDRESS_FILE", tmp_path / "ray_current_cluster", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if recorded:
        monkeypatch.setenv("RAY_ADDRESS", recorded)
    started = time.perf_counter()
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), "--backend", "ray",
                              "--address", "auto"] + TINY)
    assert message in line and time.perf_counter() - started < 60, line


def test_a_task_asking_for_more_than_any_node_has_is_refused():
    from persalign.runner.ray_backend import RayOptions, check_resources

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}]
    check_resources(nodes, RayOptions(num_cpus=2))
    with pytest.raises(Exception, match=r"--num-gpus 1: no node of the Ray cluster has that many \(GPU per node at "
                                        r"most 0\)"):
        check_resources(nodes, RayOptions(num_gpus=1))
    with pytest.raises(Exception, match="--num-cpus 3: no node"):
        check_resources(nodes, RayOptions(num_cpus=3))


def test_data_summary_counts_the_prompts_the_budget_cuts(capsys):
    """Issue #29 (5): prompts beyond the budget are counted before any run, by `persalign data summary`."""
    base = ["data", "summary", "demo-baselines", "policies=[tiny-llama]", "data.embedder=hashing-bow"]
    assert cli.main(base) == 0
    assert "prompts cut to fit (tiny-llama, budget 1536 tokens): 0 of 36 query prompts" in capsys.readouterr().out
    assert cli.main(base + ["generation.max_prompt_tokens=100"]) == 0
    assert "prompts cut to fit (tiny-llama, budget 100 tokens): 36 of 36 query prompts" in capsys.readouterr().out

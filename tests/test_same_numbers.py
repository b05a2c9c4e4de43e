"""Same numbers on every machine (issue #51): any thread count in the environment, another matrix-product
kernel, any install folder; every model the model it claims to be. Runs are fresh processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from persalign.core.errors import ModelLoadError
from tests.golden import HOSTILE_FOLDER, assert_same, load_golden

ROOT = Path(__file__).resolve().parents[1]


def _golden_values(which: str, out: Path, **env) -> dict:
    """`python -m tests.golden WHICH OUT` in a fresh process with `env` added; the values it wrote."""
    out.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "PERSALIGN_CACHE": str(out.parent / "cache"), **env}
    done = subprocess.run([sys.executable, "-m", "tests.golden", which, str(out)], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_the_environments_thread_count_changes_no_number_not_even_a_raw_float(tmp_path):
    """Before #51 (41e66f0) the tiny run at OMP_NUM_THREADS=1 and =4 differed here in 4 Best-of-N RM scores (on
    the issue's Intel machine a Ray task at 1 thread moved a trained LoRE head by 1.5 % against 2 threads)."""
    one = _golden_values("tiny", tmp_path / "one" / "values.json", OMP_NUM_THREADS="1")
    four = _golden_values("tiny", tmp_path / "four" / "values.json", OMP_NUM_THREADS="4")
    assert json.dumps(one, sort_keys=True) == json.dumps(four, sort_keys=True)  # bit for bit


def test_persalign_computes_with_its_own_thread_count_whatever_the_environment_says():
    code = "from persalign.models.numerics import pin_numerics; import json; print(json.dumps(pin_numerics()))"
    for threads in ("1", "3"):
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": threads},
                              capture_output=True, text=True, timeout=120, check=True)
        record = json.loads(done.stdout)
        assert record["threads"] == 1, record
    done = subprocess.run([sys.executable, "-c", code.replace("pin_numerics()", "pin_numerics(2)")],
                          capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout)["threads"] == 2  # the config's `threads` is the one that counts


def test_another_matrix_product_kernel_moves_no_reported_number(tmp_path):
    """What another CPU changes, emulated here: MKL forced onto its other (SSE2) code path rounds every matrix
    product differently. Every reported number and generation must stay; this is the measurement behind the
    off-machine tolerances of tests/golden.py."""
    expected, _ = load_golden("tiny")
    moved = _golden_values("tiny", tmp_path / "compatible" / "values.json", MKL_CBWR="COMPATIBLE")
    assert_same(expected, moved, same_machine=False)
    with pytest.raises(AssertionError):  # ... while the raw floats did move: the emulation is not a no-op
        assert_same(expected, moved, same_machine=True)


def test_a_resume_on_another_machine_or_thread_count_says_so_in_one_line(tmp_path, cache_dir):
    from persalign.core.config import load_config
    from persalign.runner.run import run

    config = load_config("demo-baselines", [
        "policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
        "generation.max_new_tokens=4", "decoders=[{name: zero_shot}]", "split.max_query_per_user=2"])
    run(config, tmp_path / "run", log=lambda *_: None)
    metrics_path = next((tmp_path / "run").glob("cells/*/*/seed-0/metrics.json"))
    metrics = json.loads(metrics_path.read_text())
    assert metrics["numerics"]["threads"] == 1 and metrics["numerics"]["kernels"]
    lines = []
    run(config, tmp_path / "run", log=lines.append)
    assert not any("another machine" in line for line in lines)  # same machine: nothing to say
    metrics["numerics"].update(cpu="Another CPU", threads=4)
    metrics_path.write_text(json.dumps(metrics))
    run(config, tmp_path / "run", log=lines.append)
    said = [line for line in lines if "another machine" in line]
    assert len(said) == 1 and "'Another CPU' -> " in said[0] and "threads 4 -> 1" in said[0]


@pytest.mark.needs_models
def test_bertscore_under_a_folder_named_t5_with_a_space_and_an_accent_is_the_real_encoder(tmp_path):
    """bert-score's own loader builds a randomly initialised T5 encoder for any name containing "t5": on the
    code before #51 (41e66f0) this folder gave other scores (the demo's zero-shot BERTScore 61.69, not 54.13)."""
    from persalign.core.config import MetricsConfig
    from persalign.metrics.generation import BertScoreMetric
    from persalign.models.loading import resolve_model_path

    folder = tmp_path / HOSTILE_FOLDER / "minilm"
    shutil.copytree(resolve_model_path("minilm-l6"), folder)
    texts = ["Stocks rally as tech shares climb", "A cat sat on the mat", "Coffee helps sleep, study says"]
    references = ["Tech shares lift stocks to a record", "The mat had a cat on it", "Coffee does not help sleep"]
    by_alias = BertScoreMetric(MetricsConfig(bertscore_model="minilm-l6")).score(texts, references)
    by_folder = BertScoreMetric(MetricsConfig(bertscore_model=str(folder))).score(texts, references)
    assert by_folder == by_alias
    assert 50 < min(r["bertscore_f1"] for r in by_alias) < max(r["bertscore_f1"] for r in by_alias) < 95


@pytest.mark.needs_models
def test_a_checkpoint_that_does_not_fill_its_model_is_an_error_naming_the_weights(tmp_path):
    from persalign.core.config import MetricsConfig
    from persalign.metrics.generation import BertScoreMetric
    from persalign.models.embedders import TransformerEmbedder
    from persalign.models.loading import resolve_model_path

    folder = tmp_path / "minilm-cut"
    shutil.copytree(resolve_model_path("minilm-l6"), folder)
    weights = next(folder.glob("*.safetensors"))
    tensors = load_file(weights)
    dropped = sorted(name for name in tensors if "encoder.layer.5." in name)
    save_file({k: v for k, v in tensors.items() if k not in dropped}, weights, metadata={"format": "pt"})
    for build in (lambda: BertScoreMetric(MetricsConfig(bertscore_model=str(folder))),
                  lambda: TransformerEmbedder(str(folder))):
        with pytest.raises(ModelLoadError, match=r"missing keys: .*encoder\.layer\.5\..* and \d+ more"):
            build()


LORA_RUN = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "generation.max_new_tokens=6",
            "generation.batch_size=4", "split.max_query_per_user=3", "seeds=[0]", "decoders=[]",
            "methods=[{name: global_rm_v2}]", "reward.epochs=1", "reward.mode=lora", "args.selection=fixed",
            "args.fixed_lambda=3.0"]


def lora_run(out: Path, *overrides: str) -> dict:
    """A tiny run whose RM trains a LoRA adapter (reward.mode=lora), its rows as tests/golden.py views them."""
    from persalign.core.config import load_config
    from persalign.runner.run import run
    from tests.golden import view

    run(load_config("demo-baselines", LORA_RUN + list(overrides)), out, log=lambda *_: None)
    return view(out)


def test_a_lora_reward_model_is_the_same_whatever_torchs_generator_held(tmp_path, cache_dir):
    """torch seeds its global generator at random in every process, and PEFT draws the adapter's A matrices from
    it: before the fix (200aaa9) two processes' LoRA RMs differed (rm_chosen 0.0504 vs 0.0452 on one pair)."""
    import torch

    torch.manual_seed(1)
    first = lora_run(tmp_path / "first")
    torch.manual_seed(2)
    second = lora_run(tmp_path / "second")
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)

"""Same numbers on every machine (issue #51): any thread count or kernel setting in the environment, another
matrix-product kernel, any install folder; every model the model it claims to be. Runs are fresh processes.
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

from persalign.core.errors import ModelLoadError, PersalignError
from persalign.models.numerics import portable_kernels_wanted
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


# What a user's environment may say about torch's and MKL's kernels; persalign computes with its own set
# (models/numerics.py) on every CPU that runs it, so none of this may move a number.
HOSTILE_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}


@pytest.mark.slow
def test_the_environments_thread_count_and_kernels_change_no_number_not_even_a_raw_float(tmp_path):
    """Before #51 (41e66f0) the tiny run at OMP_NUM_THREADS=1 and =4 differed here in 4 Best-of-N RM scores (on
    the issue's Intel machine a Ray task at 1 thread moved a trained LoRE head by 1.5 %). Before the kernels were
    pinned (2026-11-27) ATen's DEFAULT kernels and MKL's SSE2 branch, what another CPU computes with, moved raw
    floats here (and on CI's CPU flipped ARGS generations of the tiny study against the AVX-512 CPU that stored
    them)."""
    stored, same_numerics = load_golden("tiny")  # stored at 1 thread by a plain run with this numerics record:
    plain = stored if same_numerics else _golden_values("tiny", tmp_path / "plain" / "values.json", OMP_NUM_THREADS="1")
    hostile = {"OMP_NUM_THREADS": "4", **(HOSTILE_KERNELS if portable_kernels_wanted() else {})}
    other = _golden_values("tiny", tmp_path / "other" / "values.json", **hostile)
    assert json.dumps(plain, sort_keys=True) == json.dumps(other, sort_keys=True)  # bit for bit


def _pinned_record(code: str = "", threads: int | None = None, **env) -> dict:
    """pin_numerics(threads)'s record in a fresh process with `env` added, after running `code` first."""
    run = (f"{code}\nfrom persalign.models.numerics import pin_numerics; import json; "
           f"print(json.dumps(pin_numerics({threads})))")
    done = subprocess.run([sys.executable, "-c", run], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_persalign_computes_with_its_own_threads_and_kernels_whatever_the_environment_says():
    for threads in ("1", "3"):
        assert _pinned_record(OMP_NUM_THREADS=threads)["threads"] == 1
    assert _pinned_record("import torch; torch.set_num_threads(3)")["threads"] == 1
    assert _pinned_record(threads=2)["threads"] == 2  # the config's `threads` is the one that counts
    if not portable_kernels_wanted():
        pytest.skip("this CPU has no AVX2: persalign's portable kernels need it (models/numerics.py)")
    record = _pinned_record(**HOSTILE_KERNELS)
    assert record["kernels"] == "AVX2" and record["mkl"] not in ("OFF", "COMPATIBLE", "SSE4_2"), record
    native = _pinned_record(PERSALIGN_KERNELS="native", **HOSTILE_KERNELS)  # the user's own choice, kept
    assert (native["kernels"], native["mkl"]) == ("DEFAULT", "COMPATIBLE"), native


def test_a_process_where_torch_ran_before_the_pin_says_its_numbers_are_its_own(monkeypatch):
    from persalign.models.numerics import unpinned

    if not portable_kernels_wanted():
        pytest.skip("this CPU has no AVX2: persalign's portable kernels need it (models/numerics.py)")
    late = _pinned_record("import torch; torch.ones(8, 8) @ torch.ones(8, 8)", **HOSTILE_KERNELS)
    assert (late["kernels"], late["mkl"]) == ("DEFAULT", "COMPATIBLE"), late  # too late to pin: recorded as it is
    assert "this CPU's own" in unpinned(late) and "DEFAULT kernels" in unpinned(late)
    assert unpinned(_pinned_record(**HOSTILE_KERNELS)) is None
    monkeypatch.setenv("PERSALIGN_KERNELS", "avx512")
    with pytest.raises(PersalignError, match="PERSALIGN_KERNELS='avx512'"):
        unpinned(late)


def test_an_unknown_kernel_choice_is_one_line_naming_the_variable(tmp_path):
    done = subprocess.run([sys.executable, "-m", "persalign.cli.commands", "plan", "demo"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PERSALIGN_KERNELS": "avx512"}, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["persalign: error: PERSALIGN_KERNELS='avx512': expected 'portable' "
                                                "(the default) or 'native'"]


@pytest.mark.slow
def test_another_matrix_product_kernel_moves_no_reported_number(tmp_path):
    """What a CPU outside the pinned kernel set changes, emulated here: MKL forced onto its other (SSE2) code
    path rounds every matrix product differently (PERSALIGN_KERNELS=native lets the environment choose). Every
    reported number and generation must stay; this is the measurement behind the off-machine tolerances of
    tests/golden.py."""
    expected, _ = load_golden("tiny")
    moved = _golden_values("tiny", tmp_path / "compatible" / "values.json", PERSALIGN_KERNELS="native",
                           MKL_CBWR="COMPATIBLE")
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


MINING = """
import hashlib, numpy as np
from persalign.models.numerics import pin_numerics
pin_numerics(1)
from persalign.data.preflamp import mine_negatives
rng = np.random.default_rng(0)
base = rng.standard_normal((40, 384))
vectors = (np.repeat(base, 20, axis=0) + 1e-6 * rng.standard_normal((800, 384))).astype(np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
users = np.arange(800) % 50
_, neighbours = mine_negatives(vectors, users, np.arange(800), np.arange(800), 10, np.random.default_rng(0))
print(hashlib.sha1(neighbours.tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_hard_negatives_do_not_follow_numpys_blas_thread_count():
    """Mined on near-duplicate texts (20 near-copies of each of 40 vectors, as templated headlines are), the
    negatives are the same whatever OMP_NUM_THREADS says. Before, the similarities went through numpy's
    OpenBLAS, which splits the product by that count: a Ray worker (OMP_NUM_THREADS=1) mined 42 of the small
    chain's 384 negatives differently from the local run, and every reward model trained on them moved."""
    digests = set()
    for threads in ("1", "2", "4"):
        done = subprocess.run([sys.executable, "-c", MINING], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": threads})
        assert done.returncode == 0, done.stderr[-2000:]
        digests.add(done.stdout.strip())
    assert len(digests) == 1, digests

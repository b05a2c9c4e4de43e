"""Every file a finished run wrote, damaged: resume and report give identical results or name the file (issue #29).

A property test (hypothesis): a file of each kind in a finished tiny run directory and its caches
(config, provenance, lock, metrics, rows, timings, λ choice, trained model, Best-of-N samples, feature
shards, embedding cache) is truncated, has a byte flipped, or is replaced by garbage; optionally every
cell is then marked unfinished, so that resume must read the damaged file back. Then `persalign run`
(resume) and `persalign report` must each either give the uninterrupted run's numbers or print one line
naming the damaged file, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persalign import cli
from tests.test_runner import TINY

ARGS = ["demo"] + TINY + ["seeds=[0]", "methods=[{name: global_rm}]", "decoders=[{name: zero_shot}]",
                          "args.lambdas=[0, 1]", "args.validation_size=2"]
# One file of each kind: (under the run dir or the cache, glob pattern)
KINDS = [("run", "config.yaml"), ("run", "provenance.json"), ("run", ".lock"),
         ("run", "cells/*/Global_RM/*/metrics.json"), ("run", "cells/*/Global_RM/*/rows.jsonl"),
         ("run", "cells/*/Global_RM/*/timings.jsonl"), ("run", "cells/*/Global_RM/*/lambda.json"),
         ("run", "models/*/*/head.json"), ("run", "models/*/*/head.safetensors"),
         ("run", "models/*/*/train_log.json"), ("run", "samples/*/*.jsonl"),
         ("cache", "features/*/shard-*.safetensors"), ("cache", "embeddings/*.npz")]
RESULTS_FILES = {"config.yaml", "provenance.json"}  # without these no resume can be checked: refused, named


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run and its cache, made once; each example works on a copy."""
    base = tmp_path_factory.mktemp("finished")
    assert _cli(["run"] + ARGS + ["-o", str(base / "run")], base / "cache") == 0
    return base


def _cli(argv, cache: Path) -> int:
    """The CLI with its cache in `cache` (hypothesis examples cannot use the function-scoped monkeypatch)."""
    before = os.environ.get("PERSALIGN_CACHE")
    os.environ["PERSALIGN_CACHE"] = str(cache)
    try:
        code = cli.main(argv)
    finally:
        if before is None:
            del os.environ["PERSALIGN_CACHE"]
        else:
            os.environ["PERSALIGN_CACHE"] = before
    return code


def results(run: Path) -> dict:
    """Every cell's numbers, less what the clock and the work meter measured (seconds differ between any two
    runs; metered FLOPs depend on what the process had already computed and memoised, as a resume does)."""
    def untimed(value):
        if isinstance(value, dict):
            return {k: untimed(v) for k, v in value.items() if not k.endswith(("_s", "_flops"))
                    and k not in ("stage_seconds", "stage_flops", "peak_memory_mib")}
        return value
    return {str(p.relative_to(run)): untimed(json.loads(p.read_text())) for p in sorted(run.glob("cells/*/*/*/metrics.json"))}


def damage(path: Path, how: str, where: float) -> None:
    data = path.read_bytes()
    cut = int(len(data) * where)
    if how == "truncate":
        path.write_bytes(data[:cut])
    elif how == "flip" and data:
        cut = min(cut, len(data) - 1)
        path.write_bytes(data[:cut] + bytes([data[cut] ^ 0xA5]) + data[cut + 1:])
    elif how == "garbage":
        path.write_bytes(b"\x00\xffnot written by persalign\n")


@settings(max_examples=26, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), how=st.sampled_from(["truncate", "flip", "garbage"]),
       where=st.floats(0.0, 0.99), redo=st.booleans())
@pytest.mark.slow
def test_a_damaged_file_gives_the_same_results_or_a_line_naming_it(finished, tmp_path_factory, capsys,
                                                                    kind, how, where, redo):
    work = tmp_path_factory.mktemp("damaged")
    shutil.copytree(finished / "run", work / "run")
    shutil.copytree(finished / "cache", work / "cache")
    root, pattern = kind
    target = sorted((work / root).glob(pattern))[0]
    damage(target, how, where)
    if redo:  # every cell unfinished: resume must read the damaged file back
        for metrics in (work / "run").glob("cells/*/*/*/metrics.json"):
            if metrics != target:
                metrics.unlink()
    capsys.readouterr()
    codes = []
    for argv in (["run"] + ARGS + ["-o", str(work / "run")], ["report", str(work / "run")]):
        codes.append(_cli(argv, work / "cache"))  # a traceback fails the test here
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("persalign:")]
        if codes[-1] != 0:  # the damaged file named, or (report, after a refused resume) the cells still absent
            assert any(target.name in line or (argv[0] == "report" and "a partial run" in line) for line in lines), \
                (argv[0], lines)
    if codes[0] != 0:
        assert target.name in RESULTS_FILES  # only a file that says what the cells are may stop a resume
        return
    assert results(work / "run") == results(finished / "run")

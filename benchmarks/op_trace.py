"""Which torch operation gives another CPU other numbers: a digest of every op's inputs and outputs, compared.

The golden runs differed on an Intel Xeon (AVX-512; the 2026-11-28 H200 host) from this AMD EPYC (AVX2) under the
same pinned kernels: untrained tiny-model log-probs moved ~1e-4 relative, far more than a reordered sum moves
them. Torch's version was ruled out here (2.11.0+cu130 and 2.13.0+cpu gave bit-identical golden runs on the
EPYC) and MKL's branch too (COMPATIBLE on both CPUs left as many differences). This tool localises the rest: it
builds the tiny Llama the golden runs use (seed 0), digests its parameters, then traces every aten operation
(a TorchDispatchMode: op name, digests of its tensor inputs and of its outputs) of persalign's policy scoring
of two fixed texts and of one Adam step of a linear reward head on those hidden states. Against a stored
trace it names the first parameter or op whose inputs agree and outputs do not: the kernel to pin or replace.
It also records what the process computes with (numerics, torch's build configuration, the sha256 of
libtorch_cpu.so, float32 precision settings, CPU flags, the environment's kernel variables).

    python benchmarks/op_trace.py --out /tmp/trace.json \
        --compare benchmarks/measured/op_trace_amd_epyc.json      # the GPU check runs it on the host CPU
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "benchmarks" / "measured" / "op_trace_amd_epyc.json"  # this AMD EPYC, torch 2.13.0+cpu, pinned
ENV_KEYS = ("MKL", "OMP", "ONEDNN", "DNNL", "ATEN", "TORCH", "KMP", "PERSALIGN")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma")
TEXTS = [("Write about rivers.", " Rivers carve valleys over time."), ("Hi", " A short answer, padded in its batch.")]


def digest(value) -> str | None:
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    data = value.detach().cpu().contiguous()
    if data.dtype == torch.bfloat16:  # numpy has no bfloat16: digest its bits
        data = data.view(torch.int16)
    return hashlib.md5(data.numpy().tobytes()).hexdigest()[:12]


def _digests(tree) -> list:
    import torch.utils._pytree as pytree

    return [d for d in map(digest, pytree.tree_leaves(tree)) if d is not None]


def facts() -> dict:
    """What this process's CPU numbers depend on, beyond the inputs."""
    import torch

    from persalign.models.numerics import _cpuinfo, numerics

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    sha = hashlib.sha256(library.read_bytes()).hexdigest() if library.exists() else None
    flags = set(_cpuinfo().get("flags", "").split())
    return {"numerics": numerics(), "libtorch_cpu_sha256": sha, "config": torch.__config__.show(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "fp32_precision": {"all": torch.backends.fp32_precision,
                               "mkldnn_matmul": torch.backends.mkldnn.matmul.fp32_precision},
            "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS},
            "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_KEYS)}}


def traced_work() -> tuple[dict, list]:
    """The tiny policy's parameter digests, and the op trace of scoring two texts and one head's Adam step."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from persalign.models.loading import LoadedLM
    from persalign.models.tiny import tiny_llama
    from persalign.engine.scoring import response_logprobs

    model, tokenizer = tiny_llama(seed=0)
    params = {name: digest(p) for name, p in model.named_parameters()}
    policy = LoadedLM("tiny-llama", model, tokenizer, torch.device("cpu"))
    prompts = [tokenizer(p)["input_ids"] for p, _ in TEXTS]
    responses = [tokenizer(r)["input_ids"] for _, r in TEXTS]
    ops: list = []

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            uninitialised = "empty" in str(func)  # memory as it was found: no number of ours
            ops.append([str(func), _digests((args, kwargs)), [] if uninitialised else _digests(out)])
            return out

    with Trace():
        response_logprobs(policy, prompts, responses, 2, None)
        with torch.no_grad():
            hidden = model.model(torch.tensor([prompts[0] + responses[0]])).last_hidden_state[0]
        torch.manual_seed(0)
        head = torch.nn.Linear(hidden.shape[-1], 1)
        optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
        loss = -torch.nn.functional.logsigmoid(head(hidden[-1]) - head(hidden[-2])).sum()
        loss.backward()
        optimizer.step()
    return params, ops


def compare(stored: dict, now: dict) -> dict:
    """The first parameter, and the first op whose inputs agree with the stored trace's but outputs do not."""
    params = [name for name, d in stored["params"].items() if now["params"].get(name) != d]
    first = None
    for index, (old, new) in enumerate(zip(stored["ops"], now["ops"])):
        if old[0] != new[0]:
            first = {"index": index, "op": new[0], "why": f"another op than the stored {old[0]}"}
            break
        if old[1] == new[1] and old[2] != new[2]:
            first = {"index": index, "op": new[0], "why": "same inputs, other outputs"}
            break
    differing = sum(old[2] != new[2] for old, new in zip(stored["ops"], now["ops"]))
    changed = {k: [stored["facts"].get(k), now["facts"].get(k)] for k in ("libtorch_cpu_sha256", "cpu_flags",
                                                                       "float32_matmul_precision", "fp32_precision")
               if stored["facts"].get(k) != now["facts"].get(k)}
    return {"params_differing": params, "ops": len(now["ops"]), "ops_with_other_outputs": differing,
            "first_op_with_same_inputs_other_outputs": first, "facts_changed": changed}


def leaves(tree, path: str = ""):
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from leaves(tree[key], f"{path}/{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, tree


def golden_differences(which: str, out: Path) -> dict:
    """Run the golden study `which` here (a fresh process: the kernels pinned before its first operation) and
    count its values that are not bit-identical to tests/golden/WHICH.json's."""
    values = out / f"golden_{which}.json"
    with tempfile.TemporaryDirectory() as cache:
        subprocess.run([sys.executable, "-m", "tests.golden", which, str(values)], cwd=ROOT, check=True,
                       env={**source_env(), "PERSALIGN_CACHE": cache}, capture_output=True, timeout=900)
    stored = json.loads((ROOT / "tests" / "golden" / f"{which}.json").read_text())["values"]
    return count_differences(stored, json.loads(values.read_text()))


def count_differences(expected, actual) -> dict:
    """How many of `expected`'s values `actual` does not hold bit for bit, generations apart, and the first."""
    expected, actual = dict(leaves(expected)), dict(leaves(actual))
    differing = [path for path in expected if actual.get(path) != expected[path]]
    return {"values": len(expected), "differing": len(differing),
            "generations_differing": sum(path.endswith("/generation") for path in differing), "first": differing[:5]}


def host_check(out: Path, goldens: list[str]) -> dict:
    """The GPU check's host_cpu step: this CPU's op trace against the stored one, and the golden runs here."""
    done = subprocess.run([sys.executable, __file__, "--out", str(out / "op_trace.json"), "--compare", str(STORED)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=source_env())
    if done.returncode != 0:
        raise RuntimeError(f"op_trace.py failed: {done.stderr.strip().splitlines()[-1:]}")
    goldens = {which: golden_differences(which, out) for which in goldens}
    return {"op_trace": json.loads(done.stdout), "goldens": goldens}


def source_env() -> dict:
    """A child process's environment: persalign's source and these tests first on its path."""
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where the trace (JSON) is written")
    parser.add_argument("--compare", help="a stored trace: print where this process's numbers part from it")
    args = parser.parse_args()
    from persalign.models.numerics import pin_numerics

    pin_numerics()  # before any torch operation: the kernels persalign computes with
    params, ops = traced_work()
    trace = {"facts": facts(), "params": params, "ops": ops}
    Path(args.out).write_text(json.dumps(trace, indent=0) + "\n")
    if args.compare:
        print(json.dumps(compare(json.loads(Path(args.compare).read_text()), trace), indent=1))
    else:
        print(f"{args.out}: {len(ops)} ops, {len(params)} parameters")


if __name__ == "__main__":
    main()

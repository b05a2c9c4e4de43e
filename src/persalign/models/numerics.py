"""The kernels and thread count persalign computes with on a CPU, fixed so a number does not depend on the machine.

Measured on the tiny golden run (issue #51; `python benchmarks/bench_numerics.py` reproduces each finding):
torch's CPU float32 results depend on the thread count in three places, and trained reward heads (Adam
turns a last-digit difference in a near-zero gradient into a full step) and ARGS near-ties amplify such
differences into other reported numbers (a Ray task at 1 thread moved a LoRE head by 1.5 %):

1. ATen's vectorised kernels (AVX2 / AVX-512) run the last elements of each thread's chunk through scalar
   code whose exp / log round differently, and the chunks are cut by the thread count;
2. the fused CPU flash-attention kernel splits short queries (ARGS's candidate steps) across threads;
3. MKL's sgemm splits products across threads in ways that change the summation order (on this AMD EPYC at
   16 threads for the LM head; on Intel, per the issue, already at 1 vs 2). MKL's "strict reproducibility"
   mode is no cure: it is refused on non-Intel CPUs and measured *less* stable here.

No setting makes all three thread-count independent at full speed, so persalign fixes the count: every
process computes with `threads` torch threads (config key, default 1), whatever the machine has or
OMP_NUM_THREADS says, and uses more cores by running cells side by side (`--backend ray`). On top, the
ATen kernel set is pinned to DEFAULT (ATEN_CPU_CAPABILITY=default): the same machine code on every x86-64
CPU, so an AVX2-only and an AVX-512 machine compute the same; its cost was not measurable on the demo's
matrix-product-bound work (benchmarks/bench_numerics.py). What stays machine-dependent: MKL's matrix
products differ between CPU vendors and instruction sets in the last digits; the record below names the
CPU, kernels and threads, and a resume on a machine that differs says so.

    python -c "from persalign.models.numerics import pin_numerics; print(pin_numerics())"
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

PINNED_ENV = {"ATEN_CPU_CAPABILITY": "default"}  # what a worker process must inherit to compute the same
DEFAULT_THREADS = 1


def cpu_name_and_vendor() -> tuple[str, str]:
    """The CPU's model name and vendor id from /proc/cpuinfo (platform's words where it is absent)."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return (fields.get("model name") or platform.processor() or platform.machine(),
            fields.get("vendor_id", "unknown"))


def pin_kernels() -> None:
    """The kernel set, unless the user set ATEN_CPU_CAPABILITY (child processes inherit it)."""
    for key, value in PINNED_ENV.items():
        os.environ.setdefault(key, value)


def pin_numerics(threads: int | None = None) -> dict:
    """Pin the kernel set and the thread count; this process's `numerics()`.

    Call it before the first torch operation of the process: torch picks its kernel set once, at its first
    kernel dispatch. The thread count can be set at any time.
    """
    pin_kernels()
    import torch

    torch.set_num_threads(threads or DEFAULT_THREADS)
    return numerics()


def numerics() -> dict:
    """What this process's floats depend on: the CPU, torch, its kernel set and its thread count."""
    import torch

    cpu, vendor = cpu_name_and_vendor()
    return {"cpu": cpu, "vendor": vendor, "torch": torch.__version__,
            "kernels": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}


def kernel_tag(device: str = "cpu") -> str:
    """Names the kernels in cache keys: features or embeddings computed with other kernels differ in the
    last digits, and a cache filled before the pin (or in a process that could not pin) must not be mixed in."""
    if not str(device).startswith("cpu"):
        return str(device).split(":")[0]
    record = numerics()
    return f"{record['kernels'].lower()}-t{record['threads']}"


def differences(before: dict, now: dict) -> list[str]:
    """'threads 2 -> 4'-style words for every field of two numerics records that differs."""
    return [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in now if before.get(key) != now.get(key)]

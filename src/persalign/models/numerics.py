"""The thread count persalign computes with, fixed so a number does not depend on the machine's core count.

Measured on the tiny golden run (issue #51; `python benchmarks/bench_numerics.py` reproduces each finding):
torch's CPU float32 results depend on the thread count in three places, and trained reward heads (Adam
turns a last-digit difference in a near-zero gradient into a full step) and ARGS near-ties amplify such
differences into other reported numbers (a Ray task at 1 thread moved a LoRE head by 1.5 %):

1. ATen's vectorised kernels (AVX2 / AVX-512) run the last elements of each thread's chunk through scalar
   code whose exp / log round differently, and the chunks are cut by the thread count;
2. the fused CPU flash-attention kernel splits short queries (ARGS's candidate steps) across threads;
3. MKL's sgemm splits some products across threads in ways that change the summation order (here the tiny
   model's LM head at 16 threads; bench_numerics.py's 680x64x32000 product did not differ; the issue's Intel
   machine differed between a 1-thread Ray task and a 2-thread local run). MKL's "strict reproducibility"
   mode is no cure: it is refused on non-Intel CPUs and measured *less* stable here.

No setting makes all three thread-count independent at full speed, so persalign fixes the count: every
process computes with `threads` torch threads (config key, default 1), whatever the machine has or
OMP_NUM_THREADS says, and uses more cores by running cells side by side (`--backend ray`). The kernel set
is left to torch: pinning ATen's DEFAULT (scalar) kernels would make AVX2 and AVX-512 machines alike in
ATen's operations, but MKL's matrix products still differ between vendors and instruction sets, and it made
a SmolLM2-shaped forward 18-21 % slower (benchmarks/bench_numerics.py). So CPUs of another vendor or vector
width differ in the last digits of raw scores; the record below names the CPU, kernels and threads, and a
resume on a machine that differs says so.

    python -c "from persalign.models.numerics import pin_numerics; print(pin_numerics())"
"""

from __future__ import annotations

import platform
from pathlib import Path

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


def pin_numerics(threads: int | None = None) -> dict:
    """Fix the thread count this process computes with (default 1); this process's `numerics()`."""
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

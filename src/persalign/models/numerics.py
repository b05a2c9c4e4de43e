"""The kernels and thread count persalign computes with, fixed so a number does not depend on the machine.

Measured on the tiny golden run (issue #51; `python benchmarks/bench_numerics.py` reproduces each finding):
torch's CPU float32 results depend on the thread count and on the kernel set, and trained reward heads (Adam
turns a last-digit difference in a near-zero gradient into a full step) and ARGS near-ties amplify such
differences into other reported numbers (a Ray task at 1 thread moved a LoRE head by 1.5 %; an AVX2 CPU
flipped 4 of the tiny study's ARGS generations and 96 of the demo's against the AVX-512 CPU that stored them):

1. ATen's vectorised kernels (AVX2 / AVX-512) run the last elements of each thread's chunk through scalar
   code whose exp / log round differently, and the chunks are cut by the thread count; AVX-512's wider
   vectors also sum in another order than AVX2's;
2. the fused CPU flash-attention kernel splits short queries (ARGS's candidate steps) across threads;
3. MKL's sgemm picks its code path by instruction set and its blocking by the cache sizes it detects, and
   splits some products across threads in ways that change the summation order.

So every process computes with `threads` torch threads (config key, default 1), whatever the machine has or
OMP_NUM_THREADS says, and uses more cores by running cells side by side (`--backend ray`); and, on every
x86-64 CPU with AVX2, with one kernel set whatever the CPU's widest: ATen's AVX2 kernels, MKL capped at AVX2
in its conditional-numerical-reproducibility mode (fixed cache sizes and reductions; the AVX2 branch on
Intel CPUs as documented; on AMD's MKL reports AUTO, its own path, measured). On an AVX2 CPU the pin
costs little (a SmolLM2-shaped forward 6.59 s pinned vs 6.40 s native at 1 thread,
`benchmarks/bench_numerics.py`); pinning the scalar DEFAULT kernels and MKL's SSE2 branch instead would also
cover CPUs without AVX2, at 3.3x the forward's time (20.9 s), so there the numbers are that CPU's own and the
record says so. Both settings are read once per process, at
its first torch operation: `pin_kernels` must come before it (persalign's CLI, `run` and Ray tasks call it
first); `PERSALIGN_KERNELS=native` keeps the CPU's own kernels (faster on AVX-512, numbers its own).

    python -c "from persalign.models.numerics import pin_numerics; print(pin_numerics())"
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from pathlib import Path

from persalign.core.errors import PersalignError

DEFAULT_THREADS = 1
KERNELS_ENV = "PERSALIGN_KERNELS"  # portable (default) | native
PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "MKL_CBWR": "AVX2"}
PORTABLE_KERNEL_SET = "AVX2"  # what torch then reports
MKL_BRANCHES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 8: "SSE4_2", 9: "AVX", 10: "AVX2",
                12: "AVX512", 14: "AVX512_E1"}  # mkl_cbwr.h's codes


@functools.cache
def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_name_and_vendor() -> tuple[str, str]:
    """The CPU's model name and vendor id from /proc/cpuinfo (platform's words where it is absent)."""
    fields = _cpuinfo()
    return (fields.get("model name") or platform.processor() or platform.machine(),
            fields.get("vendor_id", "unknown"))


def cpu_identity() -> str:
    """Vendor, family and model of the CPU ('AuthenticAMD family 26 model 2'): virtual machines often report one
    model name ('AMD EPYC') for CPUs whose MKL code paths differ."""
    fields = _cpuinfo()
    vendor = fields.get("vendor_id", platform.machine())
    return f"{vendor} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"


def portable_kernels_wanted() -> bool:
    """Whether this process should compute with PORTABLE_KERNELS: the CPU runs AVX2 and the user did not ask
    for the native ones."""
    choice = os.environ.get(KERNELS_ENV, "portable")
    if choice not in ("portable", "native"):
        raise PersalignError(f"{KERNELS_ENV}={choice!r}: expected 'portable' (the default) or 'native'")
    return choice == "portable" and "avx2" in _cpuinfo().get("flags", "").split()


def pin_kernels() -> bool:
    """Ask torch and MKL for the portable kernel set (whatever the environment said); it takes effect only
    before this process's first torch operation. False where it is not wanted (see above)."""
    if not portable_kernels_wanted():
        return False
    os.environ.update(PORTABLE_KERNELS)
    return True


def pin_numerics(threads: int | None = None) -> dict:
    """Fix the kernels (where possible) and the thread count this process computes with (default 1); this
    process's `numerics()`."""
    import torch

    torch.set_num_threads(threads or DEFAULT_THREADS)
    return numerics()


def mkl_branch() -> str | None:
    """MKL's reproducibility branch in this process (OFF: its native dispatch); None without MKL."""
    import torch

    try:  # torch links MKL statically; its service symbols are exported
        get = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    code = get(1)  # MKL_CBWR_BRANCH
    return MKL_BRANCHES.get(code, str(code))


def numerics() -> dict:
    """What this process's floats depend on: the CPU, torch, its kernel set, MKL's branch and the threads.
    Pins the kernels first: asking torch or MKL which kernels they use fixes them for the process."""
    import torch

    pin_kernels()
    cpu, vendor = cpu_name_and_vendor()
    return {"cpu": cpu, "vendor": vendor, "torch": torch.__version__,
            "kernels": torch.backends.cpu.get_cpu_capability(), "mkl": mkl_branch(), "threads": torch.get_num_threads()}


def unpinned(record: dict) -> str | None:
    """Why a process that wanted the portable kernels computes with others (torch ran before the pin), or None."""
    if not portable_kernels_wanted() or (record["kernels"] == PORTABLE_KERNEL_SET and record["mkl"] != "OFF"):
        return None
    return (f"note: computing with {record['kernels']} kernels and MKL branch {record['mkl']}, not persalign's "
            "portable set: torch ran before it could be pinned (call persalign.models.numerics.pin_kernels() "
            "first, or run the persalign command), so these numbers are this CPU's own")


def kernel_tag(device: str = "cpu") -> str:
    """Names the kernels in cache keys: features or embeddings computed with other kernels differ in the
    last digits, and a cache filled before the pin (or in a process that could not pin) must not be mixed in."""
    if not str(device).startswith("cpu"):
        return str(device).split(":")[0]
    record = numerics()
    return f"{record['kernels']}-mkl{record['mkl']}-t{record['threads']}".lower()


def differences(before: dict, now: dict) -> list[str]:
    """'threads 2 -> 4'-style words for every field of two numerics records that differs."""
    return [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in now if before.get(key) != now.get(key)]

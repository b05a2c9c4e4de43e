"""Where torch's CPU numbers depend on the thread count and the kernel set, and what pinning them costs.

The findings behind persalign/models/numerics.py (issue #51), each in a fresh process (torch and MKL pick
their kernels once per process): for each suspect operation, whether its output is bit-identical at 1, 2, 4
and 16 threads; then the seconds of a small-LM forward pass (SmolLM2-135M's shapes, random weights) at 1
and 2 threads — with the CPU's native kernels, with the portable set persalign pins (ATen's AVX2 kernels,
MKL capped at AVX2 in its reproducible mode) and with the set every x86-64 CPU runs (ATen's scalar DEFAULT
kernels, MKL's SSE2 branch).

    python benchmarks/bench_numerics.py            # prints a table and one JSON line
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from persalign.models.numerics import PORTABLE_KERNELS, cpu_identity, cpu_name_and_vendor

PROBE = r"""
import hashlib, json, time, torch
torch.manual_seed(0)
def digest(t): return hashlib.md5(t.detach().contiguous().numpy().tobytes()).hexdigest()[:8]
x = torch.randn(8, 85, 128)                      # an MLP activation, more elements than one thread's grain
q, k, v = torch.randn(4, 2, 2, 16), torch.randn(4, 2, 193, 16), torch.randn(4, 2, 193, 16)  # ARGS step
h, head = torch.randn(680, 64), torch.randn(64, 32000)   # an LM head over a batch of positions
probes = {"silu (vector tails)": lambda: torch.nn.functional.silu(x),
          "flash attention, 2 queries": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v),
          "matmul, LM head (MKL)": lambda: h @ head}
from persalign.models.numerics import mkl_branch
out = {"kernels": f"{torch.backends.cpu.get_cpu_capability()}/MKL {mkl_branch()}", "same_at_1_2_4_16_threads": {},
       "forward_s": {}}
for name, probe in probes.items():
    digests = set()
    for threads in (1, 2, 4, 16):
        torch.set_num_threads(threads)
        digests.add(digest(probe()))
    out["same_at_1_2_4_16_threads"][name] = len(digests) == 1
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                     num_attention_heads=9, num_key_value_heads=3, vocab_size=49152)).eval()
ids = torch.randint(0, 49152, (16, 96))
for threads in (1, 2):
    torch.set_num_threads(threads)
    with torch.no_grad():
        model(ids)
        start = time.perf_counter()
        for _ in range(3):
            model(ids)
    out["forward_s"][threads] = (time.perf_counter() - start) / 3
print(json.dumps(out))
"""


KERNEL_SETS = {"native": {}, "portable (pinned)": PORTABLE_KERNELS,
               "every x86-64": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}}


def probe(kernels: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (*PORTABLE_KERNELS, "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **kernels}, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    results = {label: probe(kernels) for label, kernels in KERNEL_SETS.items()}
    cpu = f"{cpu_name_and_vendor()[0]} ({cpu_identity()})"  # the kernels' costs differ by vendor (issue #73)
    print(f"CPU: {cpu}")
    print(f"{'operation':30s} " + " ".join(f"{label + ' ' + r['kernels']:>32s}" for label, r in results.items()))
    for name in results["native"]["same_at_1_2_4_16_threads"]:
        cells = ["same" if r["same_at_1_2_4_16_threads"][name] else "DIFFERS" for r in results.values()]
        print(f"{name:30s} " + " ".join(f"{c:>32s}" for c in cells))
    for threads in ("1", "2"):
        cells = [f"{r['forward_s'][threads]:.3f} s" for r in results.values()]
        print(f"{'forward 16x96, ' + threads + ' thread(s)':30s} " + " ".join(f"{c:>32s}" for c in cells))
    print(json.dumps({"benchmark": "numerics", "cpu": cpu, **results}))


if __name__ == "__main__":
    main()

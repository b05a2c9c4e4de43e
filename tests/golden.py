"""Values stored before the one-deployment rebuild (issue #16), and the view of a run they are compared on.

`tests/golden/*.json` were written by this file at commit db18ad0 (before the
runner was rebuilt), so the test that reads them compares the new code with the
old numbers, not with whatever the new code prints:

    PERSALIGN_CACHE=/tmp/golden-cache python -m tests.golden tiny   # tiny model, every deployment kind
    PERSALIGN_CACHE=/tmp/golden-cache python -m tests.golden study  # the tiny end-to-end study of test_study.py
    python -m tests.golden demo                                     # the baselines demo (SmolLM2, real model)
    python -m tests.golden demo-study                               # `make demo`: the whole chain (SmolLM2)

Re-stored on 2026-11-24 (issue #28), on the machine each file names. On
that day's CI machine (AMD EPYC, AVX-512 kernels) the db18ad0 values no
longer reproduced even at the commit before any change of that day: every
reported number of the baselines demo was still identical, but raw float32
scores moved up to 4 % (a rejected response whose log-prob sums many tokens)
and, in the tiny study, ARGS near-ties flipped two LoRE/MPU generations and
MPU's win rate (66.67 → 88.89). The same day's changes also move numbers on
purpose: MPU and PAL seed a new user's row by name (not by table position),
the rows carry counted work, and the whole-chain demo (`demo-study.json`, new)
has 4 adaptation users. A test on another kind of CPU is skipped with that
reason rather than compared with floats of another kernel set.

Re-stored on 2026-11-25 (issue #39), each change checked cell by cell against the
files it replaced: tiny.json: only the Best-of-N cells (samples are now seeded per
query and drawn in fixed groups of 8, not per batch) and the counted work of the
two methods whose λ is 0 (greedy decoding now, greedy's work; their outputs are
unchanged); study.json: unchanged; demo.json: BERTScore-F1 in the 8th significant
digit (the metric's forwards are grouped by 8, not by batch_size); demo-study.json:
the new demo (32 authors, 16 adapting, the λ grid [0, 0.03, 0.1, 0.3, 1]).

An earlier exception, made once: the raw per-row float32 scores (FLOAT32_COLUMNS) of
tiny.json and study.json were re-stored when the frozen feature pass became
padding-free (issue #19). Before, a cached feature carried the float noise of
whatever prompts shared its padded batch (~1e-7 on the tiny model), which the
trained heads amplify to ~1e-4 in the raw RM scores; now a feature is a
function of its pair alone. Every reported number (accuracies, ROUGE, λ, win
rates, generations) was checked identical to the db18ad0 values before the
raw columns were replaced, and still is on every run of the test.

The view keeps what a reader of the results sees: each cell's summary numbers
(timings and memory dropped), its chosen λ, and every row's generation and
pair scores.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"

# Every kind of deployment on the tiny model: the three baselines, ARGS with a
# sequence-level head, a personalized head and a token-level head (λ chosen by
# the harmonic rule), Best-of-N, and the policy-side soft-prompt method.
TINY_ALL_DEPLOYMENTS = [
    "policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]",
    "generation.max_new_tokens=6", "generation.batch_size=4", "split.max_query_per_user=3", "seeds=[0]",
    "decoders=[{name: zero_shot}, {name: icl, shots: 2}, {name: icl_rag, shots: 2}]",
    "methods=[{name: global_rm}, {name: lore}, {name: genarm}, {name: pdpo, max_steps: 4}]",
    "reward.epochs=3", "args.lambdas=[0.0, 1.0]", "args.validation_size=4",
    "best_of_n.enabled=true", "best_of_n.ns=[1,2]",
]

# tests/test_study.py's tiny end-to-end study (`persalign study demo --quick` on the tiny model).
TINY_STUDY = [
    "policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "generation.max_new_tokens=6",
    "generation.batch_size=4", "methods=[{name: global_rm}, {name: lore}, {name: mpu}]", "args.selection=fixed",
    "decoders=[{name: zero_shot}, {name: icl, shots: 1}, {name: icl, shots: 2}, {name: icl_rag, shots: 2}]",
]

SKIPPED = {"stage_seconds", "stage_flops", "stage_shared_flops", "peak_memory_mib", "settings", "decoder_index", "seed_dependent",
           "deployment", "args_candidate_forwards"}
# stage_flops: metered work, padding included (tests/test_work_meter.py checks it); args_candidate_forwards: the
# work the shared ARGS pass did, which depends on the backend (Ray decodes each cell alone; tests/test_args_shared.py)
ROW_COLUMNS = ("generation", "s_chosen", "s_rejected", "rm_chosen", "rm_rejected", "rm_score", "win")


# Raw per-row scores are float32 sums: length-sorted batching (issue #19) changes the summation order
# inside a forward, which moves them in the 7th significant digit. Every reported number (accuracies,
# ROUGE, λ, win rates, the generations themselves) must still be identical.
FLOAT32_COLUMNS = {"s_chosen", "s_rejected", "rm_chosen", "rm_rejected", "rm_score"}


def assert_same(expected, actual, where="") -> None:
    """Exact equality, floats to 1e-9 (JSON round-trip; raw float32 scores to 1e-5), first difference named."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(expected) == sorted(actual), f"{where}: keys {sorted(expected)} " \
            f"!= {sorted(actual) if isinstance(actual, dict) else actual!r}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}/{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(expected) == len(actual), f"{where}: lengths differ"
        for i, (a, b) in enumerate(zip(expected, actual)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(actual, bool):
        raw = where.rsplit("/", 1)[-1] in FLOAT32_COLUMNS  # P-DPO's is a difference of two ~200-sized sums
        tolerance = {"rel": 1e-5, "abs": 1e-4} if raw else {"rel": 1e-9, "abs": 1e-9}
        assert actual == pytest.approx(expected, **tolerance), f"{where}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def view(run_dir: Path) -> dict:
    """cell label/seed -> its summary numbers, λ and per-row values, in a JSON-comparable form."""
    from persalign.runner.store import Cell, RunStore

    store = RunStore(run_dir)
    out = {}
    for metrics in store.all_metrics():
        cell = Cell(metrics["policy"], metrics["decoder"], metrics["seed"])
        rows = sorted(store.read_rows(cell), key=lambda r: r["id"])
        out[f"{cell.decoder} | seed {cell.seed}"] = {
            "summary": {k: v for k, v in metrics.items() if k not in SKIPPED},
            "lambda": metrics.get("settings", {}).get("lambda"),
            "rows": [{k: r[k] for k in ("id",) + ROW_COLUMNS if k in r} for r in rows],
        }
    return dict(sorted(out.items()))


def run_tiny(out_dir: Path) -> dict:
    from persalign.config import load_config
    from persalign.runner.run import run

    run(load_config("demo-baselines", TINY_ALL_DEPLOYMENTS), out_dir, log=lambda *_: None)
    return view(out_dir)


def run_tiny_study(out_dir: Path) -> dict:
    from persalign.study import run_study

    (run_dir,) = run_study(["demo-baselines"], TINY_STUDY, str(out_dir), quick=True, log=lambda *_: None)
    return view(run_dir)


def run_demo(out_dir: Path) -> dict:
    from persalign.config import load_config
    from persalign.runner.run import run

    run(load_config("demo-baselines"), out_dir, log=lambda *_: None)  # the demo before issue #18's whole chain
    return view(out_dir)


def stable_verdict_table(report_md: str) -> list[str]:
    """The report's (first) verdict table without what a clock measured: the seconds column and parts."""
    table = []
    for line in report_md.split("## Verdict", 1)[1].splitlines()[1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    stable = []
    for line in table:
        cells = line.strip("|").split("|")
        del cells[7]  # "Measured s / output"
        stable.append("|".join(re.sub(r" \([0-9.]+ s\)", "", cell) for cell in cells))
    return stable


def run_demo_study(out_dir: Path) -> dict:
    """`make demo`: `persalign study demo` (the whole chain on SmolLM2): cells, printed lines, verdict table."""
    from persalign.study import headline_lines, run_study

    (run_dir,) = run_study(["demo"], [], str(out_dir), log=lambda *_: None)
    verdict, findings = headline_lines(run_dir / "report.md")
    return {"cells": view(run_dir), "printed": verdict + findings,
            "verdict_table": stable_verdict_table((run_dir / "report.md").read_text())}


def machine() -> str:
    """What the stored floats depend on: the CPU, torch and the kernel set torch picked for it."""
    import platform

    import torch

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    cpu = names[0] if names else platform.processor() or platform.machine()
    return f"{cpu} | torch {torch.__version__} | {torch.backends.cpu.get_cpu_capability()}"


def load_golden(which: str):
    """The values stored for `which`; a test on another kind of CPU is skipped, saying why."""
    stored = json.loads((GOLDEN_DIR / f"{which}.json").read_text())
    if stored["machine"] != machine():
        pytest.skip(f"tests/golden/{which}.json was stored on '{stored['machine']}', this machine is "
                    f"'{machine()}': trained heads and ARGS near-ties amplify the CPU kernels' float rounding "
                    f"(see tests/golden.py); store them here with `python -m tests.golden {which}`")
    return stored["values"]


def main(which: str) -> None:
    runner = {"tiny": run_tiny, "study": run_tiny_study, "demo": run_demo, "demo-study": run_demo_study}[which]
    with tempfile.TemporaryDirectory() as tmp:
        values = runner(Path(tmp) / "run")
    GOLDEN_DIR.mkdir(exist_ok=True)
    stored = {"machine": machine(), "values": values}
    (GOLDEN_DIR / f"{which}.json").write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN_DIR / which}.json: {len(values)} cells")


if __name__ == "__main__":
    main(sys.argv[1])

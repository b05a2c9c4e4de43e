"""persalign on CUDA equals persalign on CPU (issue #55): each check runs the tiny models on the device under test
and asserts against the CPU result of the same models.

The device is CUDA (skipped where there is none); `PERSALIGN_CHECK_DEVICE=cpu` runs the same checks on the CPU,
which is how `benchmarks/gpu_check.py --cpu-dry-run` exercises them in the suite. Set `PERSALIGN_CHECK_RECORD`
to a JSON file to keep what each check measured (the GPU check's report reads it).

    pytest -m cuda tests/test_cuda.py                                   # on a CUDA machine
    PERSALIGN_CHECK_DEVICE=cpu pytest -m cuda tests/test_cuda.py        # the dry run

In float32 every reported number and every generation must equal the CPU's. In bf16 the policy's and the
reward backbone's floats carry ~3 significant digits, so generations may part at near-ties and trained heads
differ; what must hold is the decisions: every pair verdict (policy and RM) whose CPU margin is clear of
bf16's rounding (BF16_CLEAR) agrees, and most verdicts agree overall (BF16_AGREEMENT).
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch

from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode
from persalign.decoders.args_graph import GraphedArgs
from persalign.decoders.args_shared import HeadRow, shared_args_decode
from persalign.engine.decoding import decode, greedy
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from tests.golden import assert_same, load_golden, run_tiny
from tests.test_rewards_args import prompts_of, random_method
from tests.test_same_numbers import lora_run

pytestmark = pytest.mark.cuda

TEXTS = ["rain", "a long day at the council", "markets fall", "the mayor speaks on the new bridge"]
BF16_CLEAR = 0.05  # a verdict whose CPU margin exceeds 5 % of the scores' size must not flip in bf16 (2^-8 steps)
BF16_AGREEMENT = 0.85  # share of all pair verdicts that must agree in bf16 (near-ties included)
VERDICT_PAIRS = {"policy": ("s_chosen", "s_rejected"), "rm": ("rm_chosen", "rm_rejected")}


@pytest.fixture(scope="module")
def device() -> torch.device:
    name = os.environ.get("PERSALIGN_CHECK_DEVICE", "cuda")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (PERSALIGN_CHECK_DEVICE=cpu runs these checks on the CPU)")
    return torch.device(name)


def record(check: str, values: dict) -> None:
    """Keep what a check measured in PERSALIGN_CHECK_RECORD's file (one JSON object of checks)."""
    path = os.environ.get("PERSALIGN_CHECK_RECORD")
    if path:
        stored = json.loads(open(path).read()) if os.path.exists(path) else {}
        stored[check] = values
        with open(path, "w") as out:
            json.dump(stored, out, indent=1)


def tiny_on(device: torch.device, seed: int = 0) -> LoadedLM:
    model, tokenizer = tiny_llama(seed=seed)
    return LoadedLM("tiny-llama", model.to(device), tokenizer, device)


def test_args_candidate_reward_equals_the_teacher_forced_prefix_reward_and_the_cpus(device):
    """Eq. 1's r(x, y<t ∘ v) from ARGS's candidate tree on the device = a separate forward of prompt + y<t ∘ v
    there, and = the CPU's value of the same candidate."""
    from persalign.rewards.backbone import RewardBackbone, pad_states

    cpu_lm, lm = tiny_on(torch.device("cpu")), tiny_on(device)
    method = random_method("global_rm", lm.model.config.hidden_size)
    on_device = copy.deepcopy(method).to(device)
    prompts = prompts_of(lm, TEXTS[:2])
    trace: list = []
    generated = args_decode(lm, RewardGuide(lm, on_device, ["u", "u"], lam=1.0, top_k=4), prompts, 5,
                            DecodeRecord(trace=trace))
    backbone, cpu_backbone = RewardBackbone(lm, "tiny"), RewardBackbone(cpu_lm, "tiny")
    worst = {"teacher_forced": 0.0, "cpu": 0.0}
    for row, prompt in enumerate(prompts):
        for step, (candidates, rewards) in enumerate(trace[: len(generated[row])]):
            for j in range(candidates.shape[1]):
                response = generated[row][:step] + [int(candidates[row, j])]
                for key, (bb, head) in {"teacher_forced": (backbone, on_device), "cpu": (cpu_backbone, method)}.items():
                    padded, mask = pad_states(bb.states([prompt], [response]))
                    with torch.no_grad():
                        expected = float(head.sequence_rewards(padded.to(bb.lm.device), mask.to(bb.lm.device),
                                                               head.user_ids(["u"]))[0])
                    worst[key] = max(worst[key], abs(float(rewards[row, j]) - expected))
    record("args_candidate_reward", {"largest_difference": worst, "device": str(device)})
    assert worst["teacher_forced"] <= 1e-4 and worst["cpu"] <= 1e-4, worst


def test_greedy_and_args_write_the_cpus_tokens_at_any_batch_size(device):
    """float32: the device's greedy and ARGS tokens equal the CPU's, batched and one prompt at a time."""
    cpu_lm, lm = tiny_on(torch.device("cpu")), tiny_on(device)
    method = random_method("global_rm_v2", lm.model.config.hidden_size)
    prompts = prompts_of(lm, TEXTS)
    outputs = {}
    for where, model, head in (("cpu", cpu_lm, method), ("device", lm, copy.deepcopy(method).to(device))):
        guide = lambda n, model=model, head=head: RewardGuide(model, head, ["u"] * n, lam=2.0, top_k=5)  # noqa: E731
        outputs[where] = {"greedy": decode(model, prompts, greedy, 8),
                          "greedy_alone": [decode(model, [p], greedy, 8)[0] for p in prompts],
                          "args": args_decode(model, guide(len(prompts)), prompts, 8),
                          "args_alone": [args_decode(model, guide(1), [p], 8)[0] for p in prompts]}
    same = {key: outputs["device"][key] == outputs["cpu"][key] for key in outputs["cpu"]}
    record("tokens", same)
    assert all(same.values()), same
    assert outputs["device"]["greedy"] == outputs["device"]["greedy_alone"]
    assert outputs["device"]["args"] == outputs["device"]["args_alone"]


def test_the_graphed_args_step_writes_the_cpus_eager_tokens(device):
    """float32: ARGS with its step captured as a CUDA graph and replayed (decoders/args_graph.py; on the CPU
    run uncaptured) writes the tokens of the CPU's eager loop, batched and one prompt at a time."""
    cpu_policy, policy, cpu_rm, rm = (tiny_on(where, seed) for seed in (0, 1) for where in (torch.device("cpu"), device))
    method = random_method("global_rm_v2", rm.model.config.hidden_size)
    on_device = copy.deepcopy(method).to(device)
    prompts = prompts_of(policy, TEXTS)
    expected = args_decode(cpu_policy, RewardGuide(cpu_rm, method, ["u"] * 4, lam=2.0, top_k=5), prompts, 8)
    graphs = GraphedArgs()  # one kept step per shape: the alone decodes after the first replay a kept graph
    graphed = graphs.decode(policy, RewardGuide(rm, on_device, ["u"] * 4, lam=2.0, top_k=5), prompts, 8)
    alone = [graphs.decode(policy, RewardGuide(rm, on_device, ["u"], lam=2.0, top_k=5), [p], 8)[0] for p in prompts]
    record("graphed_args", {"batched_equal": graphed == expected, "alone_equal": alone == expected,
                            "kept_steps": len(graphs.replayers)})
    assert graphed == expected and alone == expected
    assert len(graphs.replayers) == 2


def test_a_replayed_graph_meters_the_work_the_cpu_meters(device):
    """A replayed CUDA graph runs no forward hook: the graphed decode's metered work (each step counted once)
    must equal the CPU's, where the same step runs uncaptured."""
    from persalign.engine.work_meter import WorkMeter

    metered, head = {}, random_method("global_rm", 64, seed=1)
    for where in (torch.device("cpu"), device):
        policy, rm = tiny_on(where, 0), tiny_on(where, 1)
        meter = WorkMeter()
        meter.watch(policy.model)
        meter.watch(rm.model)
        method = copy.deepcopy(head).to(where)
        GraphedArgs(meter).decode(policy, RewardGuide(rm, method, ["u"] * 4, lam=1.0, top_k=5),
                                  prompts_of(policy, TEXTS), 8)
        metered[where.type] = meter.flops
    record("graphed_args_metered_flops", metered)
    assert metered[device.type] == metered["cpu"] > 0


def test_a_lora_run_with_cuda_graph_reports_the_cpus_eager_numbers(device, tmp_path, monkeypatch):
    """float32, `args.cuda_graph: true`: a run whose LoRA RM's ARGS cell decodes its λ grid and its query
    batches with the captured step on the device reports what the eager run reports on the CPU (every
    reported number, λ and generation). On the H200 this passed with a fixed λ (2026-11-27) and with the λ grid
    (2026-11-28)."""
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    choice = ["args.selection=harmonic", "args.lambdas=[0.0, 1.0, 3.0]", "args.validation_size=4"]  # a λ grid
    cpu = lora_run(tmp_path / "cpu", "device=cpu", "dtype=float32", *choice)
    graphed = lora_run(tmp_path / "device", f"device={device.type}", "dtype=float32", "args.cuda_graph=true", *choice)
    record("lora_run_cuda_graph", {"cells": len(graphed)})
    assert_same(cpu, graphed, same_machine=device.type == "cpu")


def test_every_graphed_decode_path_writes_the_cpus_eager_tokens(device):
    """float32: greedy, ICL (a demonstration block before each prompt) and Best-of-N's seeded sampling on the
    policy's captured step (engine/graphed_decode.py; on the CPU run uncaptured) write the tokens of the CPU's
    eager loop, batched and one prompt at a time (issue #76)."""
    from persalign.decoders.best_of_n_samples import sampler
    from persalign.engine.decoding import decode_from, prefill
    from persalign.engine.graphed_decode import GraphedDecodes

    cpu_lm, lm = tiny_on(torch.device("cpu")), tiny_on(device)
    block = prompts_of(lm, ["an earlier headline of this user, and another one"])[0]
    paths = {"greedy": (prompts_of(lm, TEXTS), lambda: greedy),
             "icl": ([block + p for p in prompts_of(lm, TEXTS)], lambda: greedy),
             "sampling": (prompts_of(lm, TEXTS), lambda: sampler(3, [f"q{i}" for i in range(len(TEXTS))]))}
    graphs, same = GraphedDecodes(), {}
    for name, (prompts, choose) in paths.items():
        expected = decode_from(cpu_lm, prefill(cpu_lm, prompts), choose(), 8)
        same[name] = graphs.decode_from(lm, prefill(lm, prompts), choose(), 8) == expected
        if name != "sampling":  # a sampler's generators are per row: alone, row i would draw from row 0's
            same[f"{name}_alone"] = [graphs.decode_from(lm, prefill(lm, [p]), choose(), 8)[0]
                                     for p in prompts] == expected
    record("graphed_decodes", {**same, "kept_steps": len(graphs.replayers)})
    assert all(same.values()), same


def test_a_run_with_generation_cuda_graph_reports_the_cpus_eager_numbers(device, tmp_path, monkeypatch):
    """float32, `generation.cuda_graph: true`: zero-shot, ICL, ICL-RAG, ARGS's λ = 0 decodes and Best-of-N's
    samples decode on the policy's captured step on the device and report what the eager run reports on the CPU."""
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    extra = ["decoders=[{name: zero_shot}, {name: icl, shots: 2}, {name: icl_rag, shots: 2}]",
             "best_of_n.enabled=true", "best_of_n.ns=[2]", "dtype=float32"]
    cpu = lora_run(tmp_path / "cpu", "device=cpu", *extra)
    graphed = lora_run(tmp_path / "device", f"device={device.type}", "generation.cuda_graph=true", *extra)
    record("run_generation_cuda_graph", {"cells": len(graphed)})
    assert_same(cpu, graphed, same_machine=device.type == "cpu")


def test_the_shared_args_pass_decodes_each_head_as_it_does_alone(device):
    lm = tiny_on(device)
    prompts = prompts_of(lm, TEXTS)
    users = [f"u{i}" for i in range(len(prompts))]
    rows, expected = [], []
    for seed in (0, 1):
        method = random_method("lore", lm.model.config.hidden_size, seed=seed).to(device)
        for lam in (0.1, 1.0, 10.0):
            rows += [HeadRow(tuple(p), method, u, lam) for p, u in zip(prompts, users)]
            expected += args_decode(lm, RewardGuide(lm, method, users, lam, 4), prompts, 8)
    shared = shared_args_decode(lm, rows, 8, 4)
    differ = [i for i, (a, b) in enumerate(zip(shared.ids, expected)) if a != b]
    record("shared_args_pass", {"rows": len(rows), "differ": len(differ),
                                "candidate_forwards_done": sum(shared.done), "needed_alone": sum(shared.needed)})
    assert all(shared.near_ties[i] > 0 for i in differ), differ
    assert sum(shared.done) < sum(shared.needed)


def test_a_tiny_run_in_float32_reports_the_cpus_numbers_and_generations(device, tmp_path, monkeypatch):
    """Every deployment kind end to end (tests/golden.py's tiny config) on the device: every reported number,
    λ and generation equals the CPU golden; the cells record the GPU memory peak where it is a GPU."""
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    values = run_tiny(tmp_path / "run", f"device={device.type}", "dtype=float32")
    expected, same_machine = load_golden("tiny")
    record("tiny_run_float32", {"cells": len(values), "same_machine_as_golden": same_machine})
    assert_same(expected, values, same_machine=same_machine and device.type == "cpu")
    metrics = [json.loads(p.read_text()) for p in (tmp_path / "run").rglob("metrics.json")]
    peaks = [m.get("peak_gpu_memory_mib") for m in metrics]
    record("peak_gpu_memory_mib", {"largest": max(p or 0 for p in peaks)})
    assert all((p is not None and p > 0) == (device.type == "cuda") for p in peaks), peaks


def verdicts(values: dict) -> dict:
    """(cell, row id, kind) -> (chosen score, rejected score) of every pair verdict a run reports."""
    out = {}
    for cell, content in values.items():
        for row in content["rows"]:
            for kind, (chosen, rejected) in VERDICT_PAIRS.items():
                if row.get(chosen) is not None and row.get(rejected) is not None:
                    out[(cell, row["id"], kind)] = (row[chosen], row[rejected])
    return out


def compare_verdicts(expected: dict, actual: dict) -> dict:
    """How many verdicts agree, and those that flipped although the CPU's margin was clear of bf16 rounding."""
    agree, clear_flips = 0, []
    for key, (chosen, rejected) in expected.items():
        margin, scale = chosen - rejected, (abs(chosen) + abs(rejected)) / 2
        got = actual[key][0] - actual[key][1]
        if (margin > 0) == (got > 0):
            agree += 1
        elif abs(margin) > BF16_CLEAR * max(scale, 1e-6):
            clear_flips.append({"verdict": " | ".join(map(str, key)), "cpu": [chosen, rejected], "bf16": actual[key]})
    return {"verdicts": len(expected), "agree": agree, "clear_flips": clear_flips}


def test_a_tiny_run_in_bf16_keeps_the_cpus_decisions(device, tmp_path, monkeypatch):
    """bf16 changes the floats (and so may part generations at near-ties, and the heads trained on bf16 states):
    the pair verdicts behind policy and RM accuracy must agree wherever the CPU's margin is clear."""
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    values = run_tiny(tmp_path / "run", f"device={device.type}", "dtype=bfloat16")
    expected, _ = load_golden("tiny")
    assert sorted(values) == sorted(expected)
    found = compare_verdicts(verdicts(expected), verdicts(values))
    generations = [(a.get("generation"), b.get("generation")) for cell in expected
                   for a, b in zip(expected[cell]["rows"], values[cell]["rows"]) if "generation" in a]
    found["generations_identical"] = sum(a == b for a, b in generations) / max(1, len(generations))
    record("tiny_run_bf16", found)
    assert not found["clear_flips"], found["clear_flips"][:3]
    assert found["agree"] >= BF16_AGREEMENT * found["verdicts"], found

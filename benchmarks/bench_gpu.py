"""persalign's deployments timed at the paper's scales on a GPU: Qwen2.5 0.5B / 1.5B / 7B shapes, batch 1 / 16 / 64.

Models are randomly initialised in code from the published configs (persalign.models.qwen_shapes), in bf16
on CUDA (float32 on CPU), so no weights are needed: speed and memory depend on the shape, not the values.
Beside each policy sits the paper's reward backbone, a Qwen2.5-0.5B-shaped model with a linear head (Eq. 1's
r). Prompts are random ids of the lengths of real prompts (48–160 tokens); ICL prompts carry 4
demonstrations before them (~600 tokens). Per architecture and batch size, each through persalign's own code:

- greedy: `decoding.decode`; ICL (4 demonstrations): the same on the long prompts; Best-of-N's sampling (the
  seeded per-row sampler); each of the three again on the policy's captured step (`GraphedDecodes`, issue #76:
  `generation.cuda_graph`), and transformers' own `generate` on a static cache, compiled (CUDA only: the anchor
  issue #76 sets; its warm-up runs every timed shape once, as "the second call timed");
- ARGS (k = 10, λ = 1) with the 0.5B RM: `args_decode` (the paper's design), and the same with its decode step
  captured as a CUDA graph and replayed (`GraphedArgs`: one capture per shape — rows and a 256-slot bucket —
  kept between decodes; the untimed warm-up pays the first, a prompt of another bucket pays its own in the
  timing);
- ARGS's shared pass: `shared_args_decode` of 3 heads over the policy's own states (reward.mode frozen:
  one candidate forward per distinct prefix serves every head);
- policy-accuracy scoring: Σ log π of a chosen and a rejected response per prompt (`logprob_sums`);
- the reference ARGS design (`bench_args.reference_args`: one prompt at a time, the prompt prefilled k times,
  the RM cache copied k times a step) on a few prompts, so ARGS ÷ reference in prompts/s;
- peak GPU memory of each stage (`torch.cuda.max_memory_allocated`, reset before it; weights included).

Targets (issue #55): ARGS ÷ greedy ≥ 0.5 in tokens/s at batch 16; ARGS ≥ 3× the reference's prompts/s at
batch 1 and ≥ 10× at batch 16 (reported for the eager loop and for the graphed step).

    python benchmarks/bench_gpu.py                                          # on a CUDA machine
    python benchmarks/bench_gpu.py --archs tiny --batches 1 4 --max-new 4   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import functools
import random
import time

import torch
from bench_args import reference_args
from common import count, emit, machine
from tokenizers import Tokenizer, models
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

from persalign.core.registry import METHODS
from persalign.decoders.args_decoding import RewardGuide, args_decode
from persalign.decoders.args_graph import GraphedArgs
from persalign.decoders.args_shared import HeadRow, shared_args_decode
from persalign.decoders.best_of_n_samples import sampler
from persalign.engine.decoding import decode, greedy, left_pad, prefill
from persalign.engine.graphed_decode import GraphedDecodes
from persalign.models.device import resolve_device, resolve_dtype
from persalign.models.loading import LoadedLM
from persalign.models.qwen_shapes import qwen_config
from persalign.rewards.policy_scoring import logprob_sums

TINY = functools.partial(LlamaConfig, vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
ARCHITECTURES = {  # the published configs' shapes (persalign.models.qwen_shapes: the one table of them)
    **{f"qwen2.5-{size}": functools.partial(qwen_config, size) for size in ("0.5b", "1.5b", "3b", "7b")},
    "tiny": TINY,
}
REWARD_BACKBONE = {"tiny": "tiny"}  # every Qwen2.5 policy: the paper's Qwen2.5-0.5B reward backbone
DEMONSTRATIONS = 4
STAGES = ("greedy", "greedy_graph", "icl", "icl_graph", "sampling", "sampling_graph", "hf_static", "args", "args_graph",
          "args_shared_pass", "scoring")
FALLIBLE = ("args_graph", "greedy_graph", "icl_graph", "sampling_graph", "hf_static")  # new on a GPU: a failure is
# recorded in its row, and the other stages still run
HF_WIDTH = 160  # the anchor's prompts padded to the longest random prompt: one compiled shape per batch size
WARM_EVERY_SHAPE = ("hf_static",)  # compiled per shape: every timed shape runs once before the timing


def id_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """One word per id, ids 0-2 special: decoding stops only at EOS, as with a real tokenizer. Sized to the
    smaller of policy and RM vocabularies (7B's padded head has 152,064 rows, the 0.5B RM 151,936)."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def build(arch: str, device: torch.device, dtype: torch.dtype, seed: int, tokenizer) -> LoadedLM:
    """A randomly initialised model of `arch`, made directly on `device` in `dtype` (SDPA attention)."""
    config = ARCHITECTURES[arch]()
    config.max_position_embeddings = 4096
    config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).eval()
    return LoadedLM(arch, model, tokenizer, device)


def random_ids(count: int, vocab: int, lengths: tuple[int, int], rng: random.Random) -> list[list[int]]:
    return [[rng.randrange(10, vocab) for _ in range(rng.randint(*lengths))] for _ in range(count)]


def linear_head(name: str, hidden: int, device: torch.device, seed: int):
    head = METHODS.get(name)(hidden, METHODS.get(name).Settings(seed=seed)).to(device).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.05)
    return head


def bench_inputs(arch: str, max_prompts: int) -> dict:
    """The benchmark's token ids for `arch` (and its RM), the same on every machine: the prompts, the ICL
    demonstration block and the scored responses (benchmarks/gpu_rates.py counts their work from these)."""
    rm_arch = REWARD_BACKBONE.get(arch, "qwen2.5-0.5b")
    vocab = min(ARCHITECTURES[a]().vocab_size for a in (arch, rm_arch))
    rng = random.Random(1)
    demos = sum(random_ids(DEMONSTRATIONS, vocab, (48, 160), rng), [])
    return {"rm_arch": rm_arch, "vocab": vocab, "demos": demos,
            "responses": random_ids(2 * max_prompts, vocab, (12, 24), rng),
            "prompts": random_ids(max_prompts, vocab, (48, 160), random.Random(0))}


def prompts_at(prompts: list, batch: int, batch1_prompts: int) -> list:
    """The prompts a batch size is timed on: `batch` of them (a few more, one at a time, at batch 1)."""
    return prompts[: max(batch, batch1_prompts if batch == 1 else batch)]


def stages(policy: LoadedLM, rm: LoadedLM, rm_head, args, inputs: dict) -> dict:
    """Each stage as fn(prompts, new tokens) -> tokens produced or scored."""
    demos, responses = inputs["demos"], inputs["responses"]
    heads = [linear_head("global_rm", policy.model.config.hidden_size, policy.device, s) for s in range(3)]
    graphs = GraphedArgs()  # captured steps kept per shape: measure's warm-up decode pays the first capture

    def count(outputs) -> int:
        return sum(len(o) for o in outputs)

    def scoring(ps, _new):
        chosen, rejected = responses[: len(ps)], responses[len(ps): 2 * len(ps)]
        logprob_sums(policy, ps + ps, chosen + rejected, batch_size=2 * len(ps))
        return count(chosen + rejected)

    decodes = GraphedDecodes()  # the policy's captured steps, kept per shape like `graphs`

    def graphed(ps, new, choose) -> int:
        return count(decodes.decode_from(policy, prefill(policy, ps), choose, new))

    def samples(ps):
        return sampler(0, [f"prompt {i}" for i in range(len(ps))])

    return {
        "greedy": lambda ps, new: count(decode(policy, ps, greedy, new)),
        "greedy_graph": lambda ps, new: graphed(ps, new, greedy),
        "icl": lambda ps, new: count(decode(policy, [demos + p for p in ps], greedy, new)),
        "icl_graph": lambda ps, new: graphed([demos + p for p in ps], new, greedy),
        "sampling": lambda ps, new: count(decode(policy, ps, samples(ps), new)),
        "sampling_graph": lambda ps, new: graphed(ps, new, samples(ps)),
        "hf_static": lambda ps, new: hf_static_generate(policy, ps, new),
        "args": lambda ps, new: count(args_decode(policy, RewardGuide(rm, rm_head, ["u"] * len(ps), 1.0, args.k), ps,
                                                  new)),
        "args_graph": lambda ps, new: count(graphs.decode(policy, RewardGuide(rm, rm_head, ["u"] * len(ps), 1.0,
                                                                            args.k), ps, new)),
        "args_shared_pass": lambda ps, new: count(shared_args_decode(
            policy, [HeadRow(tuple(p), h, "u", 1.0) for h in heads for p in ps], new, args.k).ids),
        "scoring": scoring,
    }


def hf_static_generate(policy: LoadedLM, prompts: list[list[int]], new: int) -> int:
    """transformers' `generate`, greedy, on a static cache (which it compiles): every row `new` tokens."""
    if policy.device.type != "cuda":
        raise RuntimeError("CUDA only: compiling a static-cache generate on a CPU takes minutes per shape")
    pad = policy.tokenizer.pad_token_id
    ids, mask, _ = left_pad([[pad] * (HF_WIDTH - len(p)) + p for p in prompts], pad, policy.device)
    mask[ids == pad] = 0  # the padding added here is padding too: every batch one shape, compiled once
    out = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                do_sample=False, cache_implementation="static", pad_token_id=pad)
    return (out.shape[1] - ids.shape[1]) * len(prompts)


def measure(fn, prompts: list[list[int]], batch: int, device: torch.device, new: int, every_shape: bool = False):
    """Tokens/s and prompts/s of fn over `prompts` in batches of `batch`, and its peak GPU memory. A short run
    of the same batch first, untimed: a shape's first use (allocator growth, kernel choice) is no stage's cost
    (on the H200 on 2026-11-26, without it, greedy — timed first at each batch size — read slower than ARGS);
    `every_shape`: every timed batch once, whole, instead (a stage compiled per shape)."""
    for first in range(0, len(prompts) if every_shape else 1, batch):
        fn(prompts[first: first + batch], new if every_shape else 2)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start, tokens = time.perf_counter(), 0
    for first in range(0, len(prompts), batch):
        tokens += fn(prompts[first: first + batch], new)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "prompts_per_s": len(prompts) / seconds,
            "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}


def measure_stage(name: str, fn, prompts: list[list[int]], batch: int, device: torch.device, new: int) -> dict:
    """`measure`, except that a FALLIBLE stage's error becomes its row ({"error": ...}) instead of ending the run."""
    every_shape = name in WARM_EVERY_SHAPE
    if name not in FALLIBLE:
        return measure(fn, prompts, batch, device, new, every_shape)
    try:
        return measure(fn, prompts, batch, device, new, every_shape)
    except Exception as error:  # noqa: BLE001 — recorded, with its type, in the stage's row
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}


def bench_architecture(arch: str, args, device: torch.device, dtype: torch.dtype) -> dict:
    inputs = bench_inputs(arch, args.max_prompts)
    rm_arch, prompts, tokenizer = inputs["rm_arch"], inputs["prompts"], id_tokenizer(inputs["vocab"])
    policy, rm = build(arch, device, dtype, 0, tokenizer), build(rm_arch, device, dtype, 1, tokenizer)
    rm_head = linear_head("global_rm", rm.model.config.hidden_size, device, 0)
    runs = stages(policy, rm, rm_head, args, inputs)
    out = {"parameters_b": sum(p.numel() for p in policy.model.parameters()) / 1e9, "reward_backbone": rm_arch}
    for batch in args.batches:
        few = prompts_at(prompts, batch, args.batch1_prompts)
        out[f"batch{batch}"] = {name: measure_stage(name, fn, few, batch, device, args.max_new)
                                for name, fn in runs.items()}
        row = out[f"batch{batch}"]
        row["args_over_greedy"] = row["args"]["tokens_per_s"] / row["greedy"]["tokens_per_s"]
    reference = measure(lambda ps, new: sum(len(reference_args(policy, rm, rm_head, p, (1.0, args.k, new)))
                                            for p in ps), prompts[: args.reference_prompts], 1, device, args.max_new)
    out["reference"] = reference
    for batch in args.batches:
        for stage in ("args", "args_graph"):
            speed = out[f"batch{batch}"][stage].get("prompts_per_s")
            out[f"batch{batch}"][f"{stage}_over_reference"] = None if speed is None else \
                speed / reference["prompts_per_s"]
    return out


def markdown(results: dict) -> list[str]:
    lines = ["| arch | batch | greedy tok/s | ICL tok/s | ARGS tok/s (÷ greedy) | ARGS ÷ reference (prompts/s) "
             "| graphed ARGS tok/s (÷ reference) | shared pass tok/s | scoring tok/s "
             "| peak GiB (greedy / ICL / ARGS / graphed / scoring) |", "|" + "---|" * 10]
    for arch, out in results.items():
        for key in [k for k in out if k.startswith("batch")]:
            row = out[key]
            peaks = " / ".join("–" if row[s].get("peak_gib") is None else f"{row[s]['peak_gib']:.1f}"
                               for s in ("greedy", "icl", "args", "args_graph", "scoring"))
            lines.append(f"| {arch} | {key[5:]} | {row['greedy']['tokens_per_s']:.0f} | "
                         f"{row['icl']['tokens_per_s']:.0f} | {row['args']['tokens_per_s']:.0f} "
                         f"({row['args_over_greedy']:.2f}) | "
                         f"{row['args_over_reference']:.1f}× | {graphed(row)} | "
                         f"{row['args_shared_pass']['tokens_per_s']:.0f} | "
                         f"{row['scoring']['tokens_per_s']:.0f} | {peaks} |")
        reference = out['reference']['tokens_per_s']
        lines.append(f"| {arch} | reference, 1 | – | – | {reference:.0f} | 1.0× | – | – | – | – |")
    return lines


def decode_paths_markdown(results: dict) -> list[str]:
    """Every decoding path eager and on its captured step (issue #76), beside transformers' compiled generate."""
    lines = ["| arch | batch | greedy tok/s: eager / graphed | ICL: eager / graphed | sampling: eager / graphed "
             "(graphed ÷ graphed greedy) | transformers static-cache generate |", "|" + "---|" * 6]
    for arch, out in results.items():
        for key in [k for k in out if k.startswith("batch")]:
            row = out[key]
            speed = {s: row[s].get("tokens_per_s") for s in ("greedy", "greedy_graph", "icl", "icl_graph",
                                                              "sampling", "sampling_graph", "hf_static")}
            text = {s: "failed" if v is None else f"{v:.0f}" for s, v in speed.items()}
            ratio = f"{speed['sampling_graph'] / speed['greedy_graph']:.2f}" if None not in (
                speed["sampling_graph"], speed["greedy_graph"]) else "–"
            lines.append(f"| {arch} | {key[5:]} | {text['greedy']} / {text['greedy_graph']} | {text['icl']} / "
                         f"{text['icl_graph']} | {text['sampling']} / {text['sampling_graph']} ({ratio}) | "
                         f"{text['hf_static']} |")
    return lines


def graphed(row: dict) -> str:
    stage = row["args_graph"]
    if "error" in stage:
        return f"failed: {stage['error'][:80]}"
    return f"{stage['tokens_per_s']:.0f} ({row['args_graph_over_reference']:.1f}×)"


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parse.add_argument("--archs", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"],
                       choices=sorted(ARCHITECTURES))
    parse.add_argument("--batches", nargs="+", type=count, default=[1, 16, 64])
    parse.add_argument("--batch1-prompts", type=count, default=4, help="prompts decoded one at a time at batch 1")
    parse.add_argument("--reference-prompts", type=count, default=2, help="prompts the slow reference design runs")
    parse.add_argument("--max-new", type=count, default=24, help="new tokens per prompt")
    parse.add_argument("--k", type=count, default=10, help="ARGS top-k")
    parse.add_argument("--device", default="auto")
    return parse


def run(args) -> dict:
    args.max_prompts = max(args.batches + [args.batch1_prompts, args.reference_prompts])
    device = resolve_device(args.device)
    dtype = resolve_dtype("auto", device)
    results = {}
    for arch in args.archs:  # one architecture's models are freed before the next is built
        results[arch] = bench_architecture(arch, args, device, dtype)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"benchmark": "gpu", "machine": machine(), "dtype": str(dtype), "k": args.k, "max_new_tokens": args.max_new,
            "max_prompts": args.max_prompts, "batch1_prompts": args.batch1_prompts, "results": results}


def main() -> None:
    result = run(parser().parse_args())
    print("\n".join(markdown(result["results"]) + [""] + decode_paths_markdown(result["results"])))
    emit(result)


if __name__ == "__main__":
    main()

"""ARGS on a GPU at 0.5B–7B scale: greedy vs ARGS vs the reference design, batch 1 / 16 / 64, peak memory.

Models are randomly initialised in code from the configs of real architectures
(Qwen2.5-0.5B, Qwen2.5-1.5B, Qwen2.5-7B shapes: layers, widths, heads, KV
heads, vocabulary), so no weights are needed; speed depends on shape, not on
the values. bf16 with SDPA on CUDA (float32 on CPU). Prompts are random token
ids with lengths drawn like real ICL prompts (48–160 tokens). Per architecture
and batch size: greedy tokens/s; ARGS (k = 10) tokens/s with a separate reward
model (a second model of the same shape + a linear head) and with the shared
backbone (the policy's own states + a head); the reference ARGS design (one
prompt at a time, the prompt prefilled k times, the RM cache copied k times a
step; bench_args.reference_args) at batch 1; peak GPU memory of each.
Targets on an H100: ARGS ÷ greedy ≥ 0.5 at batch 16; ≥ 3× the reference
prompts/s at batch 1 and ≥ 10× at batch 16.

    python benchmarks/bench_gpu.py                          # on a CUDA machine: every architecture
    python benchmarks/bench_gpu.py --archs tiny --batches 1 4 --prompts 8 --max-new 8   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import functools
import random
import time

import torch
from tokenizers import Tokenizer, models
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

from bench_args import reference_args, run_batches
from common import emit, machine
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode
from persalign.decoding import decode, greedy
from persalign.models.device import resolve_device, resolve_dtype
from persalign.models.loading import LoadedLM
from persalign.models.qwen_shapes import qwen_config
from persalign.registry import METHODS

ARCHITECTURES = {  # the published configs' shapes (persalign.models.qwen_shapes: the one table of them)
    **{f"qwen2.5-{size}": functools.partial(qwen_config, size) for size in ("0.5b", "1.5b", "3b", "7b")},
    "tiny": lambda: LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2),
}


def id_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """One word per id over the whole vocabulary, ids 0-2 special: decoding stops only at EOS, as with a
    real tokenizer (ids a tokenizer does not cover count as stops in persalign.decoding)."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def build(arch: str, device: torch.device, dtype: torch.dtype, seed: int) -> LoadedLM:
    """A randomly initialised model of `arch`, made directly on `device` in `dtype` (SDPA attention)."""
    config = ARCHITECTURES[arch]()
    config.max_position_embeddings = 4096
    tokenizer = id_tokenizer(config.vocab_size)
    config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).eval()
    return LoadedLM(arch, model, tokenizer, device)


def prompts_like_icl(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(rng.randint(48, 160))] for _ in range(count)]


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def measure(fn, prompts, batch: int, device: torch.device) -> dict:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    result = run_batches(fn, prompts, batch)
    del result["stats"]
    result["wall_s"] = time.perf_counter() - start
    result["peak_gib"] = peak_gib(device)
    return result


def bench_architecture(arch: str, args, device: torch.device, dtype: torch.dtype) -> dict:
    policy = build(arch, device, dtype, seed=0)
    separate_rm = build(arch, device, dtype, seed=1)
    hidden = policy.model.config.hidden_size
    head = METHODS.get("global_rm")(hidden, METHODS.get("global_rm").Settings(seed=0)).to(device).eval()
    with torch.no_grad():
        head.head.linear.weight.normal_(0, 0.05)
    prompts = prompts_like_icl(args.prompts, policy.model.config.vocab_size)
    decode(policy, prompts[:1], greedy, 2)  # warm-up (kernels, allocator) outside the timings
    out = {"layers": policy.model.config.num_hidden_layers, "hidden": hidden,
           "parameters_b": sum(p.numel() for p in policy.model.parameters()) / 1e9}
    for batch in args.batches:
        greedy_run = measure(lambda ps, st: decode(policy, ps, greedy, args.max_new), prompts, batch, device)
        row = {"greedy": greedy_run}
        for name, rm in (("args_separate_rm", separate_rm), ("args_shared", policy)):
            def guided(ps, st, rm=rm):
                guide = RewardGuide(rm, head, ["u"] * len(ps), lam=1.0, top_k=args.k)
                return args_decode(policy, guide, ps, args.max_new, DecodeRecord(st))
            row[name] = measure(guided, prompts, batch, device)
            row[name]["over_greedy_tokens_per_s"] = row[name]["tokens_per_s"] / greedy_run["tokens_per_s"]
        out[f"batch{batch}"] = row
    few = prompts[: args.reference_prompts]
    reference = measure(lambda ps, st: [reference_args(policy, separate_rm, head, p, 1.0, args.k, args.max_new)
                                        for p in ps], few, 1, device)
    out["reference_batch1"] = reference
    for batch in args.batches:
        for name in ("args_separate_rm", "args_shared"):
            measured = out[f"batch{batch}"][name]
            measured["prompts_per_s_over_reference"] = measured["prompts_per_s"] / reference["prompts_per_s"]
    del policy, separate_rm
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def print_table(results: dict) -> None:
    print("| arch | batch | greedy tok/s | ARGS sep. RM tok/s (÷greedy, ×ref) | ARGS shared tok/s (÷greedy, ×ref) "
          "| peak GiB (sep.) |")
    print("|---|---|---|---|---|---|")
    for arch, out in results.items():
        for key in [k for k in out if k.startswith("batch")]:
            row = out[key]
            cells = [f"{row[n]['tokens_per_s']:.0f} ({row[n]['over_greedy_tokens_per_s']:.2f}, "
                     f"{row[n]['prompts_per_s_over_reference']:.1f}×)" for n in ("args_separate_rm", "args_shared")]
            peak = row["args_separate_rm"]["peak_gib"]
            print(f"| {arch} | {key[5:]} | {row['greedy']['tokens_per_s']:.0f} | {cells[0]} | {cells[1]} | "
                  f"{'-' if peak is None else f'{peak:.1f}'} |")
        print(f"| {arch} | reference, 1 | – | {out['reference_batch1']['tokens_per_s']:.0f} | – | – |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"],
                        choices=sorted(ARCHITECTURES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--prompts", type=int, default=64, help="prompts per measurement (≥ the largest batch)")
    parser.add_argument("--reference-prompts", type=int, default=4, help="prompts the slow reference design runs")
    parser.add_argument("--max-new", type=int, default=32, help="new tokens per prompt")
    parser.add_argument("--k", type=int, default=10, help="ARGS top-k")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    dtype = resolve_dtype("auto", device)
    results = {arch: bench_architecture(arch, args, device, dtype) for arch in args.archs}
    print_table(results)
    emit({"benchmark": "gpu", "machine": machine(), "dtype": str(dtype), "k": args.k, "max_new_tokens": args.max_new,
          "results": results})


if __name__ == "__main__":
    main()

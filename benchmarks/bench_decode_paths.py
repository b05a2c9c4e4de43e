"""Decode paths on this CPU (issue #31 point 4): persalign's greedy loop vs transformers' maintained paths.

Same policy (SmolLM2-135M-Instruct, fp32), same zero-shot prompts of real news_category query items,
greedy, batch `--batch`; each path's outputs are compared token for token with persalign's loop
(`persalign.engine.decoding.decode`, a DynamicCache, the path every deployment uses):

- `hf_dynamic`: `model.generate` with its default (dynamic) cache;
- `hf_static`: `model.generate(cache_implementation="static")` (preallocated cache, fixed shapes);
- `hf_static_compiled`: the same with the forward under `torch.compile` (inductor, needs a C compiler);
  its first call (compilation) is reported apart from the timed repetitions.

ARGS is not timed here: its candidate forward uses a custom 4D tree mask over a cache that grows and is
trimmed each step (`decoders/args_decoding.py`), which the static-cache and compiled generate paths do
not take; its policy step is the greedy step measured here.

    python benchmarks/bench_decode_paths.py                  # 16 prompts, 24 new tokens, 3 repetitions
    python benchmarks/bench_decode_paths.py --quick          # 4 prompts, 8 new tokens, 1 repetition
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import count, emit, machine, news_query_pairs, peak_memory_mib

from persalign.core.prompts import PromptFormatter
from persalign.engine.decoding import decode, greedy, left_pad
from persalign.models.loading import load_causal_lm


def persalign_greedy(lm, prompts, max_new):
    return decode(lm, prompts, greedy, max_new)


def hf_generate(lm, prompts, max_new, **options):
    ids, mask, _ = left_pad(prompts, lm.tokenizer.pad_token_id, lm.device)
    # stop where persalign's loop stops a row (EOS or the end of a line), so both decode the same steps
    out = lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                            pad_token_id=lm.tokenizer.pad_token_id, stop_strings=["\n"], tokenizer=lm.tokenizer,
                            **options)
    return [row.tolist() for row in out[:, ids.shape[1]:]]


def same_decisions(rows, reference) -> bool:
    """Whether every row chose the reference's tokens for as long as the reference wrote (persalign stops a
    row at EOS or the end of a line; generate stops at EOS only, so its rows may run on)."""
    return all(list(row[: len(ref)]) == list(ref) for row, ref in zip(rows, reference))


def timed_runs(fn, reps: int) -> tuple[list, list[float]]:
    seconds, out = [], None
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
    return out, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=count, default=16)
    parser.add_argument("--batch", type=count, default=16)
    parser.add_argument("--max-new-tokens", type=count, default=24)
    parser.add_argument("--reps", type=count, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.batch, args.max_new_tokens, args.reps = 4, 4, 8, 1
    lm = load_causal_lm("smollm2-135m-instruct", device="cpu", dtype="float32")
    formatter = PromptFormatter(lm.tokenizer, "headline")
    _, _, pairs = news_query_pairs(args.prompts)
    prompts = [formatter.prompt_ids(c.prompt) for c in pairs][: args.batch]
    max_new = args.max_new_tokens
    persalign_greedy(lm, prompts, 1)  # warm-up
    paths = {"persalign_loop": lambda: persalign_greedy(lm, prompts, max_new),
             "hf_dynamic": lambda: hf_generate(lm, prompts, max_new),
             "hf_static": lambda: hf_generate(lm, prompts, max_new, cache_implementation="static")}
    results = {}
    reference, seconds = timed_runs(paths["persalign_loop"], args.reps)
    results["persalign_loop"] = {"median_s": statistics.median(seconds), "identical": True}
    for name in ("hf_dynamic", "hf_static"):
        paths[name]()  # warm-up
        out, seconds = timed_runs(paths[name], args.reps)
        results[name] = {"median_s": statistics.median(seconds), "identical": same_decisions(out, reference)}
    plain_forward = lm.model.forward
    lm.model.forward = torch.compile(plain_forward, dynamic=False)
    start = time.perf_counter()
    try:
        paths["hf_static"]()
        compile_s = time.perf_counter() - start
        out, seconds = timed_runs(paths["hf_static"], args.reps)
        results["hf_static_compiled"] = {"median_s": statistics.median(seconds), "first_call_s": compile_s,
                                         "identical": same_decisions(out, reference)}
    except Exception as error:  # a backend that cannot compile here is a result too
        results["hf_static_compiled"] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    finally:
        lm.model.forward = plain_forward
    tokens = sum(len(r) for r in reference)
    for name, row in results.items():
        if "median_s" in row:
            row["tokens_per_s"] = tokens / row["median_s"]
            row["over_persalign"] = results["persalign_loop"]["median_s"] / row["median_s"]
        print(f"{name:<22} " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in row.items()))
    emit({"benchmark": "decode_paths", "machine": machine(), "prompts": len(prompts), "max_new_tokens": max_new,
          "generated_tokens": tokens, "reps": args.reps, "results": results, "peak_memory_mib": peak_memory_mib(),
          "torch": torch.__version__})


if __name__ == "__main__":
    main()

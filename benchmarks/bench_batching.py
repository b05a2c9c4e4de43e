"""Token-budget, length-sorted batching vs fixed batches in data order (issue #19).

Two sets of real sequences: (a) news_category query items with 8 of the
author's own items as ICL demonstrations in the prompt, plus the author's
headline as the response; (b) an uneven long-input set built from the same
data: item k concatenates the descriptions of articles k .. k + (k mod 12),
so inputs run from one article to twelve, as real users' writing does. For each: processed (padded) ÷ real
tokens of both batchings, and with --time the wall time and peak memory of
the frozen reward-feature pass (persalign.rewards.backbone; before: distinct
prompts 16 at a time in data order, padded), of the policy log-prob pass
(persalign.engine.scoring.response_logprobs) and of greedy generation (20 new
tokens, batches planned by persalign.engine.batching.plan_generation as the
evaluator plans a cell) both ways, each in its own process so the peaks do not mix.

    python benchmarks/bench_batching.py              # token counts only (seconds)
    python benchmarks/bench_batching.py --time       # also time the three passes both ways
    python benchmarks/bench_batching.py --time --budget 8192 --only sorted   # another token budget
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import count, emit, machine, news_query_pairs, peak_memory_mib

from persalign.engine.batching import default_budget, padding_ratio, plan_batches

BATCH_SIZE = 16
MAX_NEW_TOKENS = 20  # the news configs allow 32; 20 keeps the bench short (both modes decode the same)


def sequences(which: str, limit: int | None) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, responses) token ids of the ICL 8-shot set or the long-input set."""
    from persalign.core.prompts import PromptFormatter
    from persalign.models.loading import load_causal_lm

    dataset, split, pairs = news_query_pairs(limit)
    items = dataset.item_by_id()
    completions = dataset.completion_by_id()
    tokenizer = load_causal_lm("smollm2-135m-instruct").tokenizer
    formatter = PromptFormatter(tokenizer, dataset.task, max_prompt_tokens=100_000)
    prompts, responses = [], []
    for k, pair in enumerate(pairs):
        if which == "icl8":
            demos = [items[i] for i in split.support.get(pair.user, [])][:8]
            prompt = pair.prompt
        else:  # uneven long inputs: 1 to 12 articles, one after another
            demos, prompt = [], "\n\n".join(p.prompt for p in (pairs + pairs)[k : k + 1 + k % 12])
        prompts.append(formatter.prompt_ids(prompt, demos, pair.history))
        reference = completions[pair.id].reference if pair.id in completions else pair.chosen
        responses.append(formatter.response_ids(reference))
    return prompts, responses


def token_figures(prompts, responses, budget: int) -> dict:
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    in_order = [list(range(s, min(s + BATCH_SIZE, len(lengths)))) for s in range(0, len(lengths), BATCH_SIZE)]
    sorted_batches = plan_batches(lengths, budget, BATCH_SIZE)
    return {"items": len(lengths), "median_tokens": sorted(lengths)[len(lengths) // 2], "longest": max(lengths),
            "processed_over_real_data_order": padding_ratio(lengths, in_order),
            "processed_over_real_sorted": padding_ratio(lengths, sorted_batches),
            "batches_data_order": len(in_order), "batches_sorted": len(sorted_batches)}


def feature_pass(lm, prompts, responses, mode: str, budget: int) -> float:
    """Seconds of the frozen reward-feature pass over the set (no cache on disk)."""
    from persalign.engine.scoring import continue_from_prefill
    from persalign.rewards.backbone import RewardBackbone

    backbone = RewardBackbone(lm, "bench")
    backbone.token_budget = budget
    start = time.perf_counter()
    if mode == "sorted":
        backbone.states(prompts, responses)
    else:  # the pass before issue #19 (each set's prompts are distinct): padded prefill, padded continuation
        for s in range(0, len(prompts), BATCH_SIZE):
            state = backbone._prefill_keeping_last_state([tuple(p) for p in prompts[s : s + BATCH_SIZE]])
            continue_from_prefill(lm, state, list(range(state.mask.shape[0])), responses[s : s + BATCH_SIZE])
    return time.perf_counter() - start


def time_pass(which: str, mode: str, limit: int | None, budget: int) -> dict:
    """The feature pass, the log-prob pass and greedy generation over the set, `mode` = data_order
    (fixed batches of BATCH_SIZE in data order, the old batching) or sorted (the token-budget plan)."""
    from types import SimpleNamespace

    import torch

    from persalign.engine.batching import plan_generation
    from persalign.engine.decoding import decode, greedy
    from persalign.engine.scoring import _logprobs_batch, response_logprobs
    from persalign.models.loading import load_causal_lm

    torch.set_grad_enabled(False)  # _logprobs_batch is the inner step of a no_grad function
    prompts, responses = sequences(which, limit)
    lm = load_causal_lm("smollm2-135m-instruct")
    feature_seconds = feature_pass(lm, prompts, responses, mode, budget)
    start = time.perf_counter()
    if mode == "sorted":
        response_logprobs(lm, prompts, responses, BATCH_SIZE, budget)
    else:
        pairs = list(zip(prompts, responses))
        for s in range(0, len(pairs), BATCH_SIZE):
            _logprobs_batch(lm, pairs[s : s + BATCH_SIZE])
    logprob_seconds = time.perf_counter() - start
    generation = SimpleNamespace(max_new_tokens=MAX_NEW_TOKENS, token_budget=budget, batch_size=BATCH_SIZE)
    plan = (plan_generation(prompts, generation, lm.device) if mode == "sorted" else
            [list(range(s, min(s + BATCH_SIZE, len(prompts)))) for s in range(0, len(prompts), BATCH_SIZE)])
    start = time.perf_counter()
    for batch in plan:
        decode(lm, [prompts[i] for i in batch], greedy, MAX_NEW_TOKENS)
    return {"feature_seconds": feature_seconds, "logprob_seconds": logprob_seconds,
            "generation_seconds": time.perf_counter() - start, "generation_batches": len(plan),
            "peak_memory_mib": peak_memory_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", action="store_true", help="also time the three passes both ways")
    parser.add_argument("--limit", type=count, default=None, help="query items per set (default: all)")
    parser.add_argument("--budget", type=count, default=default_budget("cpu"), help="token budget of the sorted plan")
    parser.add_argument("--only", choices=("data_order", "sorted"), help="time one batching only")
    parser.add_argument("--child", nargs=2, metavar=("SET", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_pass(args.child[0], args.child[1], args.limit, args.budget)))
        return
    result = {"benchmark": "batching", "budget": args.budget, "batch_size": BATCH_SIZE, "sets": {}}
    for which in ("icl8", "long"):
        figures = token_figures(*sequences(which, args.limit), result["budget"])
        if args.time:
            for mode in [args.only] if args.only else ["data_order", "sorted"]:
                command = [sys.executable, __file__, "--child", which, mode, "--budget", str(args.budget)] + (
                    ["--limit", str(args.limit)] if args.limit else [])
                out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                figures[f"passes_{mode}"] = json.loads(out.strip().splitlines()[-1])
        result["sets"][which] = figures
        print(which, json.dumps(figures))
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()

"""ARGS decoding speed: greedy vs ARGS (k=10), batch 1 and 16, vs the reference design and the floor.

Policy: SmolLM2-135M-Instruct. Reward models: (a) a separate LoRA RM on the
same backbone (its own model instance), (b) the shared frozen backbone (the
policy itself + a head). Prompts: zero-shot prompts of news_category query
items. Measured in one run:

- tokens/s and prompts/s of greedy and of ARGS, batch 1 (prompts one at a
  time) and batch 16;
- the reference ARGS design re-implemented faithfully: one prompt at a time,
  the prompt prefilled k times into the RM, the RM cache copied k times every
  step, no EOS stop (same prompts, same max length);
- the floor: one policy decode step + one RM forward of k candidate tokens on
  a cached prefix, batch-matched: what any ARGS must pay per step;
- the λ choice's shared prompt prefill (`RewardGuide.prefills`): all prompts
  as one batch, decoded fresh vs with its prefill taken from the memo (as every
  method × seed × λ after the first does), median of `--reps` alternations.

    python benchmarks/bench_args.py                       # 16 prompts, 24 new tokens
    python benchmarks/bench_args.py --quick               # 4 prompts, 12 new tokens
    python benchmarks/bench_args.py --shared-prefill-only --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from common import count, emit, machine, news_query_pairs, non_negative, peak_memory_mib

from persalign.core.prompts import PromptFormatter
from persalign.core.registry import METHODS
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode, tree_forward
from persalign.engine.decoding import decode, extend_mask, greedy, prefill
from persalign.models.loading import decoder_stack, load_causal_lm
from persalign.rewards.lora import attach_lora


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def run_batches(fn, prompts, batch):
    outputs, seconds, stats = [], 0.0, []
    for start in range(0, len(prompts), batch):
        st = {}
        out, sec = timed(lambda first=start, stats=st: fn(prompts[first : first + batch], stats))
        outputs += out
        seconds += sec
        stats.append(st)
    tokens = sum(len(o) for o in outputs)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "prompts_per_s": len(prompts) / seconds, "stats": stats}


@torch.no_grad()
def reference_args(policy, rm, method, prompt, decoding: tuple[float, int, int]):
    """The reference design: batch 1, prompt prefilled k times into the RM, RM cache copied k times a step;
    `decoding`: (λ, k, new tokens)."""
    lam, k, max_new_tokens = decoding
    ids = torch.tensor([prompt], device=policy.device)
    out = policy.model(input_ids=ids, use_cache=True)
    logprobs = torch.log_softmax(out.logits[:, -1].float(), -1)
    stack = decoder_stack(rm.model)
    rm_cache = stack(input_ids=ids.repeat(k, 1), use_cache=True).past_key_values
    users = method.user_ids(["u"] * k)
    generated = []
    for _ in range(max_new_tokens):  # no EOS stop
        top, cand = logprobs[:, : len(policy.tokenizer)].topk(k, -1)  # a padded head's extra rows are no tokens
        step_cache = copy.deepcopy(rm_cache)
        hidden = stack(input_ids=cand.T, past_key_values=step_cache, use_cache=True).last_hidden_state
        rewards = method.token_rewards(hidden.float(), users)[:, -1]
        choice = int((top[0] + lam * rewards).argmax())
        token = cand[:, choice : choice + 1]
        for layer in step_cache.layers:
            layer.keys = layer.keys[choice : choice + 1].repeat(k, 1, 1, 1)
            layer.values = layer.values[choice : choice + 1].repeat(k, 1, 1, 1)
        rm_cache = step_cache
        generated.append(int(token))
        out = policy.model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
        logprobs = torch.log_softmax(out.logits[:, -1].float(), -1)
    return generated


@torch.no_grad()
def floor_step(policy, rm, prompts, k, reps=5):
    """Median seconds of one policy decode step + one RM k-candidate forward on a cached prefix."""
    times = []
    for _ in range(reps):
        p_state, r_state = prefill(policy, prompts), prefill(rm, prompts)
        tokens = p_state.logprobs.argmax(-1)
        candidates = p_state.logprobs.topk(k, -1).indices
        next_pos = p_state.positions[:, -1] + 1
        start = time.perf_counter()
        policy.model(input_ids=tokens[:, None], attention_mask=extend_mask(p_state.mask),
                     position_ids=next_pos[:, None], past_key_values=p_state.cache, use_cache=True)
        tree_forward(decoder_stack(rm.model), r_state.cache, r_state.mask, next_pos, candidates)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def shared_prefill_rows(policy, rms, method, prompts, args, max_new) -> dict:
    """Batch seconds and prefill seconds of one ARGS batch decoded fresh vs with a memoised prompt prefill."""
    rows = {}
    for name, rm in rms.items():
        memo: dict = {}
        def once(prefills, rm=rm):
            st = {}
            guide = RewardGuide(rm, method, ["u"] * len(prompts), lam=args.lam, top_k=args.k, prefills=prefills)
            out, sec = timed(lambda: args_decode(policy, guide, prompts, max_new, DecodeRecord(st)))
            return out, sec, st["prefill_s"]
        filled, _, _ = once(memo)  # fills the memo, untimed: the first method × seed × λ pays it
        fresh, reused = [], []
        for _ in range(args.reps):  # alternated so that drift hits both alike
            fresh.append(once(None))
            reused.append(once(memo))
        assert all(out == filled for out, _, _ in fresh + reused), "a reused prefill changed the output"
        def med(runs, i):
            return statistics.median(r[i] for r in runs)

        rows[f"shared_prefill_{name}"] = {
            "fresh_batch_s": med(fresh, 1), "reused_batch_s": med(reused, 1),
            "fresh_prefill_s": med(fresh, 2), "reused_prefill_s": med(reused, 2),
            "saved_fraction": 1 - med(reused, 1) / med(fresh, 1)}
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 prompts, 12 new tokens")
    parser.add_argument("--k", type=count, default=10, help="ARGS top-k")
    parser.add_argument("--lam", type=non_negative, default=1.0, help="ARGS λ")
    parser.add_argument("--max-new-tokens", type=count, help="new tokens per prompt (default 24; 12 with --quick)")
    parser.add_argument("--reps", type=count, default=3, help="fresh/reused alternations of the shared-prefill timing")
    parser.add_argument("--shared-prefill-only", action="store_true",
                        help="time only the shared prompt prefill (skips greedy, batch 1, the reference, the floor)")
    return parser.parse_args()


def speed_rows(policy, rms, method, prompts, args, max_new) -> dict:
    """Greedy and ARGS (each RM) at batch 1 and batch n, against the floor, greedy and the reference design."""
    n, result = len(prompts), {}
    for batch in (1, n):
        key = f"batch{batch}"
        result[f"greedy_{key}"] = run_batches(lambda ps, st: decode(policy, ps, greedy, max_new), prompts, batch)
        for name, rm in rms.items():
            def guided(ps, st, rm=rm):
                guide = RewardGuide(rm, method, ["u"] * len(ps), lam=args.lam, top_k=args.k)
                return args_decode(policy, guide, ps, max_new, DecodeRecord(st))
            measured = run_batches(guided, prompts, batch)
            steps = sum(s["steps"] for s in measured["stats"])
            measured["decode_s_per_step"] = sum(s["decode_s"] for s in measured["stats"]) / steps
            starts = range(0, n, batch) if batch == n else [0]  # batch 1: the first prompt stands for all
            measured["floor_s_per_step"] = statistics.mean(floor_step(policy, rm, prompts[i : i + batch], args.k)
                                                           for i in starts)
            measured["per_step_over_floor"] = measured["decode_s_per_step"] / measured["floor_s_per_step"]
            measured["over_greedy_time"] = measured["seconds"] / result[f"greedy_{key}"]["seconds"]
            del measured["stats"]
            result[f"args_{name}_{key}"] = measured
        del result[f"greedy_{key}"]["stats"]
    decoding = (args.lam, args.k, max_new)
    reference = run_batches(lambda ps, st: [reference_args(policy, rms["lora_rm"], method, p, decoding) for p in ps],
                            prompts, 1)
    del reference["stats"]
    result["reference_lora_rm"] = reference
    for name in rms:
        for batch in (1, n):
            mine = result[f"args_{name}_batch{batch}"]
            mine["prompts_per_s_over_reference"] = mine["prompts_per_s"] / reference["prompts_per_s"]
    return result


def print_rows(result: dict) -> None:
    for key, row in result.items():
        if key.startswith("shared_prefill_"):
            print(f"{key:28s} batch {row['fresh_batch_s']:.2f} s fresh, {row['reused_batch_s']:.2f} s reused "
                  f"(prefill {row['fresh_prefill_s']:.2f} -> {row['reused_prefill_s']:.3f} s), "
                  f"{100 * row['saved_fraction']:.0f} % saved")
        elif isinstance(row, dict) and "seconds" in row:
            extra = "".join(f", {k} {row[k]:.2f}" for k in ("per_step_over_floor", "prompts_per_s_over_reference",
                                                             "over_greedy_time") if k in row)
            print(f"{key:28s} {row['tokens_per_s']:7.1f} tok/s {row['prompts_per_s']:6.2f} prompts/s{extra}")


def main() -> None:
    args = parse_args()
    n, max_new = (4, 12) if args.quick else (16, 24)
    max_new = args.max_new_tokens or max_new
    torch.manual_seed(0)
    _, _, pairs = news_query_pairs(n)
    policy = load_causal_lm("smollm2-135m-instruct")
    formatter = PromptFormatter(policy.tokenizer, "headline")
    prompts = [formatter.prompt_ids(p.prompt) for p in pairs]
    lora_rm = attach_lora(load_causal_lm("smollm2-135m-instruct"), 8, 16)
    lora_rm.model.eval()
    method = METHODS.get("global_rm")(policy.model.config.hidden_size, METHODS.get("global_rm").Settings(seed=0)).eval()
    with torch.no_grad():
        method.head.linear.weight.normal_(0, 0.05)
    rms = {"lora_rm": lora_rm, "shared": policy}
    decode(policy, prompts[:1], greedy, 2)  # warm-up outside the timings
    result = {"benchmark": "args", "prompts": n, "max_new_tokens": max_new, "k": args.k, "machine": machine(),
              "prompt_tokens": [min(map(len, prompts)), max(map(len, prompts))]}
    result |= shared_prefill_rows(policy, rms, method, prompts, args, max_new)
    if not args.shared_prefill_only:
        result |= speed_rows(policy, rms, method, prompts, args, max_new)
    result["peak_memory_mib"] = peak_memory_mib()
    print_rows(result)
    emit(result)


if __name__ == "__main__":
    main()

"""Peak memory and disk of each stage at the paper's scales (issue #40 point 3): Qwen2.5-shaped random models.

For each size, in this process, on a few tokens of the demo's prompts (CPU, bf16): the model is built
(`persalign.models.qwen_shapes`), then every stage runs once through persalign's own code and its peak
resident memory is read (Linux VmHWM, reset before each stage through /proc/self/clear_refs):

- greedy generation (zero-shot, and ICL with 2 demonstrations): prefill + 4 decode steps, 2 prompts;
- ARGS: a prefill, then 4 steps of the k = 10 candidate tree forward on its cache;
- Best-of-N: 4 sampled rows per prompt, 4 tokens;
- reward features: the frozen backbone's per-token states of 2 (prompt, response) pairs, and the bytes
  per response token they take in the feature cache;
- scoring: Σ log π of 2 chosen and 2 rejected responses;
- P-DPO: one backward through the whole policy to 8 soft-prompt vectors (what a DPO step costs).

    python benchmarks/bench_scales.py --sizes 3b 7b
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import emit, machine

from persalign.core.prompts import PromptFormatter
from persalign.data.demo_authors import demo_records
from persalign.models.qwen_shapes import qwen_random

STATUS = Path("/proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM back to the current resident size


def peak_gib() -> float:
    line = next(line for line in STATUS.read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**20


def stage(results: dict, name: str, fn) -> None:
    reset_peak()
    started = time.perf_counter()
    with torch.no_grad() if name != "pdpo_step" else torch.enable_grad():
        fn()
    results[name] = {"peak_gib": round(peak_gib(), 2), "seconds": round(time.perf_counter() - started, 1)}
    print(f"  {name:<18} peak {results[name]['peak_gib']:.2f} GiB, {results[name]['seconds']:.1f} s", flush=True)


def measure(size: str) -> dict:
    from persalign.core.records import UserItem
    from persalign.decoders.best_of_n_samples import sample_keys, sample_responses, sampler
    from persalign.engine.decoding import decode, greedy
    from persalign.models.loading import LoadedLM
    from persalign.rewards.backbone import RewardBackbone
    from persalign.rewards.policy_scoring import logprob_sums

    reset_peak()
    started = time.perf_counter()
    model, tokenizer = qwen_random(size)
    results = {"build": {"peak_gib": round(peak_gib(), 2), "seconds": round(time.perf_counter() - started, 1)},
               "parameters_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3)}
    lm = LoadedLM(f"qwen2.5-{size}-random", model, tokenizer, torch.device("cpu"))
    formatter = PromptFormatter(tokenizer, "headline")
    records = demo_records()[:4]
    prompts = [formatter.prompt_ids(r["input"]) for r in records[:2]]
    demos = [UserItem(r["id"], r["user"], r["input"], r["output"]) for r in records[2:]]
    icl = [formatter.prompt_ids(r["input"], demos) for r in records[:2]]
    responses = [formatter.response_ids(r["output"]) for r in records[:2]]
    stage(results, "generation", lambda: decode(lm, prompts, greedy, 4))
    stage(results, "icl_generation", lambda: decode(lm, icl, greedy, 4))
    stage(results, "args_candidates", lambda: args_steps(lm, prompts))
    stage(results, "best_of_n", lambda: sample_responses(lm, prompts, 4, 4, sampler(0, sample_keys(["a", "b"], 4))))
    backbone = RewardBackbone(lm, f"bench-{size}", None)
    states: list = []
    stage(results, "features", lambda: states.extend(backbone.states(prompts, responses, 2)))
    stored = torch.empty(0, dtype=backbone.stored_dtype).element_size()  # the cache keeps the model's precision
    results["feature_bytes_per_response_token"] = stored * states[0].shape[-1]
    stage(results, "scoring", lambda: logprob_sums(lm, prompts + prompts, responses + responses[::-1], 4))
    stage(results, "pdpo_step", lambda: soft_prompt_backward(model, prompts[0] + responses[0]))
    return results


def args_steps(lm, prompts, k: int = 10, steps: int = 4) -> None:
    """ARGS's expensive part: k candidate tokens per row scored in one tree forward on the prompt's cache."""
    from persalign.decoders.args_scorers import keep_chosen, tree_forward
    from persalign.models.loading import decoder_stack

    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    cache = lm.model(input_ids=ids, attention_mask=mask, use_cache=True).past_key_values
    candidates = torch.randint(0, 1000, (len(prompts), k))
    for j in range(steps):  # score k candidates, keep the first, as an ARGS step does
        tree_forward(decoder_stack(lm.model), cache, mask, torch.full((len(prompts),), width + j), candidates)
        keep_chosen(cache, width + j, torch.zeros(len(prompts), dtype=torch.long))
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], 1)


def soft_prompt_backward(model, ids: list[int], soft_tokens: int = 8) -> None:
    embed = model.get_input_embeddings()
    soft = torch.zeros(1, soft_tokens, embed.embedding_dim, dtype=embed.weight.dtype, requires_grad=True)
    for p in model.parameters():
        p.requires_grad_(False)
    inputs = torch.cat([soft, embed(torch.tensor([ids]))], 1)
    model(inputs_embeds=inputs).logits.float().logsumexp(-1).mean().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["3b", "7b"], choices=["0.5b", "1.5b", "3b", "7b"])
    args = parser.parse_args()
    for size in args.sizes:
        print(f"qwen2.5-{size}-random (bf16, CPU):", flush=True)
        emit({"benchmark": "scales", "machine": machine(), "size": size, **measure(size)})


if __name__ == "__main__":
    main()

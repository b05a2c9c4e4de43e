"""bf16 against float32 on the same random Qwen2.5-0.5B (issue #40 point 5): how often the decisions agree.

One model, built in bf16 and upcast to float32 (the same weights in both), over the demo's query prompts:

- greedy tokens: the share of positions where bf16's greedy choice equals float32's (teacher-forced on
  float32's path, so one early difference does not count twice);
- ARGS decisions: the same for argmax over the top-k of log π + λ r, r from one random linear head on the
  last hidden state (the frozen-backbone reward shape), λ = 1;
- policy-accuracy verdicts: pair_outcome(Σ log π(chosen), Σ log π(rejected)) with the tie rule the runs use,
  the share of pairs whose verdict (win / loss / tie) is the same, and the largest |difference| of the sums.

Random weights make the logits nearly flat, so near-ties are frequent: the shares here are a floor for a
trained model. Ties are decided by the same rule in both (metrics/ranking.py: a relative tolerance).

    python benchmarks/bench_bf16.py --prompts 16 --steps 8
"""

from __future__ import annotations

import argparse
import copy

import torch
from common import count, emit, machine

from persalign.core.prompts import PromptFormatter
from persalign.data.demo_authors import demo_records
from persalign.metrics.ranking import pair_outcome
from persalign.models.qwen_shapes import qwen_random


@torch.no_grad()
def steps_of(model, head, ids: list[int], path: list[int], top_k: int) -> tuple[list[int], list[int]]:
    """(greedy choice, ARGS choice) at each step of `path`, given the prefix of `path` before it."""
    greedy, guided = [], []
    for j in range(len(path)):
        out = model(torch.tensor([ids + path[:j]]), output_hidden_states=True)
        logprobs = torch.log_softmax(out.logits[0, -1].float(), -1)
        greedy.append(int(logprobs.argmax()))
        top = logprobs.topk(top_k)
        states = model.model.embed_tokens(top.indices).float()  # candidate tokens' embeddings, one head
        rewards = states @ head + out.hidden_states[-1][0, -1].float() @ head
        guided.append(int(top.indices[int((top.values + rewards).argmax())]))
    return greedy, guided


@torch.no_grad()
def greedy_path(model, ids: list[int], steps: int) -> list[int]:
    path: list[int] = []
    for _ in range(steps):
        path.append(int(model(torch.tensor([ids + path])).logits[0, -1].argmax()))
    return path


@torch.no_grad()
def response_logprob(model, ids: list[int], response: list[int]) -> float:
    logits = model(torch.tensor([ids + response])).logits[0, len(ids) - 1: -1].float()
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(response)[:, None]).sum())


def compare(prompts: int, steps: int, top_k: int = 10) -> dict:
    bf16, tokenizer = qwen_random("0.5b")
    fp32 = copy.deepcopy(bf16).float()
    head = torch.randn(bf16.config.hidden_size, generator=torch.Generator().manual_seed(0)) / 30
    formatter = PromptFormatter(tokenizer, "headline")
    records = demo_records()[:: max(1, len(demo_records()) // prompts)][:prompts]
    same_greedy = same_args = total = 0
    verdicts, largest = 0, 0.0
    for i, record in enumerate(records):
        ids = formatter.prompt_ids(record["input"])
        path = greedy_path(fp32, ids, steps)
        reference = steps_of(fp32, head, ids, path, top_k)
        low = steps_of(bf16, head, ids, path, top_k)
        same_greedy += sum(a == b for a, b in zip(reference[0], low[0]))
        same_args += sum(a == b for a, b in zip(reference[1], low[1]))
        total += steps
        chosen = formatter.response_ids(record["output"])
        rejected = formatter.response_ids(records[(i + 1) % len(records)]["output"])
        sums = {name: (response_logprob(m, ids, chosen), response_logprob(m, ids, rejected))
                for name, m in (("fp32", fp32), ("bf16", bf16))}
        verdicts += pair_outcome(*sums["fp32"]) == pair_outcome(*sums["bf16"])
        largest = max(largest, *(abs(a - b) for a, b in zip(sums["fp32"], sums["bf16"])))
    return {"prompts": len(records), "steps": steps, "greedy_identical": same_greedy / total,
            "args_identical": same_args / total, "policy_verdicts_identical": verdicts / len(records),
            "largest_logprob_sum_difference": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=count, default=16)
    parser.add_argument("--steps", type=count, default=8)
    args = parser.parse_args()
    emit({"benchmark": "bf16_vs_fp32", "machine": machine(), **compare(args.prompts, args.steps)})


if __name__ == "__main__":
    main()

"""How often the graphed ARGS step (decoders/args_graph.py) writes the eager loop's tokens, per dtype.

The graphed step's attention reads every slot of its fixed-size buffers under a mask; the eager loop's reads
only the slots filled. In float32 the tokens are the same; in bf16 the rounding of the two can part a
near-tie. Measured on the CPU with the tiny random models (the step uncaptured: on CUDA the captured graph
runs the same kernels as its eager warm-up step), over policy seeds × RM-head seeds, 4 prompts each with
per-row λ 0.3 / 1 / 3 / 10, k = 5, 16 new tokens:

    python benchmarks/graph_agreement.py                 # float32 and bf16
    python benchmarks/graph_agreement.py --policies 2    # a quick look
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from common import count, emit, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny-model helpers
from tests.test_args_graph import TEXTS, tiny  # noqa: E402
from tests.test_rewards_args import prompts_of, random_method  # noqa: E402

from persalign.decoders.args_decoding import RewardGuide, args_decode  # noqa: E402
from persalign.decoders.args_graph import GraphedArgs  # noqa: E402


def agreement(dtype: torch.dtype, policies: int, heads: int) -> dict:
    """Identical generations, and tokens written before the first parting, graphed vs eager."""
    identical = rows = agreeing = tokens = 0
    for policy_seed in range(policies):
        policy, rm = tiny(policy_seed), tiny(policy_seed + 10)
        policy.model.to(dtype)
        rm.model.to(dtype)
        for head_seed in range(heads):
            torch.manual_seed(head_seed)
            method = random_method("global_rm_v2", rm.model.config.hidden_size)
            guide = RewardGuide(rm, method, ["u"] * len(TEXTS), lam=[0.3, 1.0, 3.0, 10.0], top_k=5)
            prompts = prompts_of(policy, TEXTS)
            for eager, graphed in zip(args_decode(policy, guide, prompts, 16),
                                      GraphedArgs().decode(policy, guide, prompts, 16)):
                rows, identical = rows + 1, identical + (eager == graphed)
                agreeing += next((i for i, (a, b) in enumerate(zip(eager, graphed)) if a != b),
                                 min(len(eager), len(graphed)))
                tokens += max(len(eager), len(graphed))
    return {"generations": rows, "identical": identical, "tokens": tokens, "tokens_before_parting": agreeing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", type=count, default=6, help="policy seeds (each with its own RM backbone)")
    parser.add_argument("--heads", type=count, default=3, help="RM head seeds per policy")
    args = parser.parse_args()
    result = {"benchmark": "graph_agreement", "machine": machine()}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        row = result[name] = agreement(dtype, args.policies, args.heads)
        print(f"{name}: {row['identical']}/{row['generations']} generations identical; "
              f"{row['tokens_before_parting']}/{row['tokens']} tokens written before any parting")
    emit(result)


if __name__ == "__main__":
    main()

"""This machine's rates on the work persalign counts: the denominators of every floor and projection.

Measured in-process on a real policy (default SmolLM2-135M-Instruct, the demo's):

- `matmul`: a 2048² fp32 matrix product (the machine's practical peak);
- `prefill`: one forward of the policy over a batch of long prompts (compute-bound);
- `decode`: greedy decode steps of a batch after a prefill (one token per row per forward);
- `candidates`: ARGS's tree forward of k candidate tokens per row on a cached prefix.

`benchmarks/bench_floor.py` sets a finished run's stages against them; `persalign plan` projects a
study's counted work with them.

    python -c "from persalign.planner.machine_rates import measure_rates; print(measure_rates(1))"
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from persalign.engine.cost import ModelShape, forward_flops, shape_of


def rate(fn, flops: float, reps: int) -> float:
    """FLOP/s of `fn` (median of `reps` timed calls after one warm-up)."""
    fn()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return flops / statistics.median(seconds)


@torch.no_grad()
def measure_rates(reps: int, batch: int = 16, context: int = 384, k: int = 10, steps: int = 8,
                  model: str = "smollm2-135m-instruct") -> dict:
    """{"shape", "gflop_per_s": {matmul, prefill, decode, candidates}} on `model` (CPU, float32)."""
    from persalign.decoders.args_decoding import tree_forward
    from persalign.models.loading import decoder_stack, load_causal_lm

    lm = load_causal_lm(model, device="cpu", dtype="float32")
    shape, net = shape_of(lm.model), lm.model
    top = min(40000, net.config.vocab_size)  # token ids any vocabulary has
    a = torch.randn(2048, 2048)
    rates = {"matmul": rate(lambda: a @ a, 2 * 2048 ** 3, reps)}
    ids = torch.randint(0, top, (4, context))
    rates["prefill"] = rate(lambda: net(input_ids=ids, logits_to_keep=1), 4 * forward_flops(shape, context, 0, 1), reps)
    prompt = torch.randint(0, top, (batch, context))
    cache = net(input_ids=prompt, use_cache=True).past_key_values

    def decode_steps():
        step_cache = copy.deepcopy(cache)
        for j in range(steps):
            net(input_ids=prompt[:, :1], past_key_values=step_cache, use_cache=True,
                position_ids=torch.full((batch, 1), context + j))
    work = batch * sum(forward_flops(shape, 1, context + j, 1) for j in range(steps))
    rates["decode"] = rate(decode_steps, work, reps)
    stack, mask = decoder_stack(net), torch.ones(batch, context, dtype=torch.long)
    candidates = torch.randint(0, top, (batch, k))
    body = ModelShape(shape.body_params, 0.0, shape.layers, shape.width)
    rates["candidates"] = rate(lambda: tree_forward(stack, copy.deepcopy(cache), mask, torch.full((batch,), context),
                                                    candidates), batch * k * forward_flops(body, 1, context), reps)
    return {"shape": shape.as_dict(), "gflop_per_s": {name: value / 1e9 for name, value in rates.items()}}

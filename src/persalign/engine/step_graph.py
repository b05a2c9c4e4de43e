"""A decode step on fixed-size buffers, captured once as a CUDA graph and replayed (issues #55, #76): the pieces every
graphed decode shares (ARGS's step, decoders/args_graph.py; the policy's own step, engine/graphed_decode.py).

At batch 1-16 a GPU decode step of a 0.5B-7B model is launch overhead, not arithmetic: a step whose tensors keep
their shapes and addresses is captured once and each later step is one `graph.replay()`. `SlotCache` holds the
keys and values of every slot a decode can reach (the write slot is a device tensor, so a captured step can move
it); `additive` turns an attention pattern into the float mask the model adds; `Replayer` runs the first step
eagerly (kernels chosen, work metered), captures the second, and replays every later one. Off CUDA the same step
runs uncaptured, so the CPU suite checks the graphed code's tokens against the eager loop's.

    pytest tests/test_args_graph.py tests/test_graphed_decode.py
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

SLOT_BUCKET = 256  # caches hold a multiple of this many slots: prompts of near lengths share one capture


class SlotCache:
    """A KV cache of fixed-size buffers (rows, heads, slots, dim) per layer; a forward of n tokens writes
    them at slots write_at .. write_at + n - 1 (`write_at`: a device tensor, so a captured step can move it).
    The model reads every slot; the attention mask says which count."""

    def __init__(self, prefill_cache, slots: int, write_at: torch.Tensor):
        self.keys, self.values, self.write_at = [], [], write_at
        for layer in prefill_cache.layers:
            rows, heads, _, dim = layer.keys.shape
            for store, filled in ((self.keys, layer.keys), (self.values, layer.values)):
                store.append(torch.zeros((rows, heads, slots, dim), dtype=filled.dtype, device=filled.device))
        self.load(prefill_cache)

    def load(self, prefill_cache) -> None:
        """A prefill's keys and values into the first slots (in place: a captured step reads these buffers)."""
        for layer, key, value in zip(prefill_cache.layers, self.keys, self.values):
            width = layer.keys.shape[2]
            key[:, :, :width].copy_(layer.keys)
            value[:, :, :width].copy_(layer.values)

    def update(self, key_states, value_states, layer_idx: int, cache_kwargs=None):
        index = self.write_at + torch.arange(key_states.shape[-2], device=key_states.device)
        self.keys[layer_idx].index_copy_(2, index, key_states)
        self.values[layer_idx].index_copy_(2, index, value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]

    def keep(self, slot: torch.Tensor, choice: torch.Tensor) -> None:
        """Each row's chosen candidate (written at slot + choice) moves to `slot`; the others go stale."""
        rows = torch.arange(choice.shape[0], device=choice.device)
        for tensor in self.keys + self.values:
            tensor[rows, :, slot.expand_as(choice)] = tensor[rows, :, slot + choice]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Booleans -> 0 / dtype minimum (eager attention adds a 4D mask; SDPA takes it as given)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed,
                                                                                      torch.finfo(dtype).min)


class Replayer:
    """One step at a time: on CUDA the first eagerly (the warm-up), then one captured graph replayed.

    Metered work (engine/work_meter.py): the first step's forwards are metered by the meter's hooks as they
    run, and every later step adds that same amount (every step has the same shapes); a capture computes
    nothing and a replay runs no hook, so both leave the hooks paused. The CPU takes the same path, uncaptured."""

    def __init__(self, state, meter=None):  # state: .step() and a device tensor .slot
        self.state, self.graph, self.meter, self.step_flops = state, None, meter, None

    def step(self) -> None:
        if self.step_flops is None:
            work: dict = {}
            with self.meter.measure(work, "flops", with_shared=True) if self.meter else nullcontext():
                self.state.step()  # a real step, eager: kernels chosen, workspaces allocated, work metered
            self.step_flops = work.get("flops", 0.0)
            self.capture()
            return
        with self.meter.paused() if self.meter else nullcontext():
            if self.graph is not None:
                self.graph.replay()
            else:  # a CPU: the same step, uncaptured
                self.state.step()
        if self.meter:
            self.meter.add(self.step_flops)

    def capture(self) -> None:
        device = self.state.slot.device
        if device.type != "cuda":
            return
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        with self.meter.paused() if self.meter else nullcontext(), torch.cuda.graph(self.graph):
            self.state.step()  # recorded, not run: the state is still after the first step

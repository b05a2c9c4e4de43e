"""Metered work: the FLOPs of every forward through the models a run watches, read from each forward's shapes.

Counted work (`cost.py`) states what a deployment's output costs by design; the meter records what the
run actually computed in each stage (padding, memoised passes skipped, the λ choice's decodes, training
with gradients), so every stage can be set against what the machine allows (benchmarks/bench_floor.py).

A forward of the transformer body over `new` tokens per row after `context` cached ones costs
`cost.forward_flops(body, new, context)` per row; the output projection 2 · P_head per row of logits
read; a forward with gradients enabled counts 3× (forward + backward). Reward heads over cached features
are not watched: their parameters are a few thousand, their FLOPs negligible.

    python -c "from persalign.work_meter import WorkMeter; print(WorkMeter().flops)"
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from persalign.cost import ModelShape, forward_flops, shape_of

TRAINING_FACTOR = 3.0  # forward + backward (≈ 2 × forward) when gradients are on


class WorkMeter:
    """Accumulates the FLOPs of the watched models' forwards; `measure` attributes them to a stage."""

    def __init__(self):
        self.flops = 0.0
        self._watched: set[int] = set()

    def watch(self, model) -> None:
        """Count every later forward of `model` (a causal LM, a PEFT wrapper of one); once per model."""
        from persalign.models.loading import decoder_stack

        if id(model) in self._watched:
            return
        self._watched.add(id(model))
        shape = shape_of(model)
        body = ModelShape(shape.body_params, 0.0, shape.layers, shape.width)
        decoder_stack(model).register_forward_pre_hook(self._body_hook(body), with_kwargs=True)
        head = model.get_output_embeddings()
        if head is not None:
            head.register_forward_hook(self._head_hook(shape.head_params, shape.width))

    def _add(self, flops: float) -> None:
        self.flops += flops * (TRAINING_FACTOR if torch.is_grad_enabled() else 1.0)

    def _body_hook(self, body: ModelShape):
        def hook(module, args, kwargs):
            tokens = kwargs.get("input_ids")
            tokens = kwargs.get("inputs_embeds") if tokens is None else tokens
            tokens = args[0] if tokens is None and args else tokens
            if tokens is None:
                return
            past = kwargs.get("past_key_values")
            context = int(past.get_seq_length()) if past is not None else 0
            self._add(tokens.shape[0] * forward_flops(body, int(tokens.shape[1]), context))
        return hook

    def _head_hook(self, head_params: float, width: int):
        def hook(module, args, output):
            rows = args[0].numel() // max(1, width)
            self._add(2.0 * head_params * rows)
        return hook

    @contextmanager
    def measure(self, record: dict, key: str):
        """Add the FLOPs of the block's forwards to `record[key]`."""
        before = self.flops
        try:
            yield
        finally:
            record[key] = record.get(key, 0.0) + (self.flops - before)

"""Metered work: the FLOPs of every forward through the models a run watches, read from each forward's shapes.

Counted work (`cost.py`) states what a deployment's output costs by design; the meter records what the
run actually computed in each stage (padding, memoised passes skipped, the λ choice's decodes, training
with gradients), so every stage can be set against what the machine allows (benchmarks/bench_floor.py).

A forward of the transformer body over `new` tokens per row after `context` cached ones costs
`cost.forward_flops(body, new, context)` per row; the output projection 2 · P_head per row of logits
read; a forward with gradients enabled counts 3× (forward + backward). Reward heads over cached features
are not watched: their parameters are a few thousand, their FLOPs negligible.

Work kept for later cells (the policy's log-prob memo, prefills and greedy batches reused by the λ choice,
the RM backbone's feature cache, Best-of-N samples, the zero-shot outputs of the win rate) is metered
apart, as shared work (`shared()`): whichever cell first needs it computes it, and a resumed run that lost
the in-memory memos computes it again, so it depends on the order and the history of the run. A cell's own
stage FLOPs leave it out and are the same in an uninterrupted and a resumed run; the shared work is stored
beside them (`stage_shared_flops`) as work done, for the floor benchmark.

    python -c "from persalign.engine.work_meter import WorkMeter; print(WorkMeter().flops)"
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from persalign.engine.cost import ModelShape, forward_flops, shape_of

TRAINING_FACTOR = 3.0  # forward + backward (≈ 2 × forward) when gradients are on


class WorkMeter:
    """Accumulates the FLOPs of the watched models' forwards; `measure` attributes them to a stage."""

    def __init__(self):
        self.flops = 0.0
        self.shared_flops = 0.0  # work done for a memo or cache that later cells reuse
        self._sharing = 0
        self._paused = 0
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

    def add(self, flops: float) -> None:
        """Count work the watched models computed without their hooks seeing it (a replayed CUDA graph)."""
        self._add(flops)

    @contextmanager
    def paused(self):
        """Forwards in the block count nothing: a CUDA graph's capture traces a step without computing it."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _add(self, flops: float) -> None:
        if self._paused:
            return
        flops *= TRAINING_FACTOR if torch.is_grad_enabled() else 1.0
        if self._sharing:
            self.shared_flops += flops
        else:
            self.flops += flops

    @contextmanager
    def shared(self):
        """Meter the block's forwards as shared work (a memo or cache filled for every later cell)."""
        self._sharing += 1
        try:
            yield
        finally:
            self._sharing -= 1

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
    def measure(self, record: dict, key: str, with_shared: bool = False):
        """Add the FLOPs of the block's own forwards to `record[key]`, and the shared work it did to
        `record[key + "_shared"]` (or to `record[key]` itself `with_shared`: training reads the feature cache
        it fills)."""
        before, shared_before = self.flops, self.shared_flops
        try:
            yield
        finally:
            own, shared = self.flops - before, self.shared_flops - shared_before
            record[key] = record.get(key, 0.0) + own + (shared if with_shared else 0.0)
            if shared and not with_shared:
                record[key + "_shared"] = record.get(key + "_shared", 0.0) + shared


def shared_work(meter: WorkMeter | None):
    """`meter.shared()`, or nothing where no meter watches (a memo used outside a run)."""
    return meter.shared() if meter is not None else nullcontext()


class SharedMemo(dict):
    """A memo kept across the cells of one policy, knowing the meter its computations are shared work of."""

    def __init__(self, meter: WorkMeter | None = None):
        super().__init__()
        self.meter = meter

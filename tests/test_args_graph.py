"""The graphed ARGS step (decoders/args_graph.py) chooses what the eager loop (`args_decode`) chooses.

On the CPU the step runs uncaptured; tests/test_cuda.py checks the captured replay on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from persalign.core.errors import ConfigError
from persalign.decoders.args_decoding import RewardGuide, args_decode
from persalign.decoders.args_graph import GraphedArgs
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from tests.test_rewards_args import prompts_of, random_method

TEXTS = ["rain", "a long day at the council", "markets fall", "the mayor speaks on the new bridge"]


def tiny(seed: int) -> LoadedLM:
    model, tokenizer = tiny_llama(seed=seed)
    return LoadedLM("tiny-llama", model, tokenizer, torch.device("cpu"))


@pytest.fixture(scope="module")
def models():
    """A policy whose end-of-text row is scaled up, so that rows end at different steps, and an RM of its own."""
    policy = tiny(4)
    with torch.no_grad():
        policy.model.lm_head.weight[policy.tokenizer.eos_token_id] *= 4
    return policy, tiny(1)


@pytest.mark.parametrize("name", ["global_rm", "global_rm_v2", "lore"])
def test_graphed_step_writes_what_the_eager_loop_writes(models, name):
    """Same tokens, row for row, for last / mean pooling and a per-user head, per-row λ, rows that end at
    different steps (the eager loop drops them, the graphed step computes them and ignores them)."""
    policy, rm = models
    torch.manual_seed(3)  # random_method draws from the global generator
    method = random_method(name, rm.model.config.hidden_size)
    method.bind(rm)
    prompts = prompts_of(policy, TEXTS)
    guide = RewardGuide(rm, method, ["a", "b", "a", "c"], lam=[0.0, 0.5, 3.0, 10.0], top_k=4)
    eager = args_decode(policy, guide, prompts, 16)
    graphed = GraphedArgs().decode(policy, guide, prompts, 16)
    assert graphed == eager
    assert len({len(row) for row in eager}) > 1, "the rows should end at different steps for this test to bite"
    assert eager[0] != eager[3]


def test_graphed_step_alone_equals_batched(models):
    policy, rm = models
    torch.manual_seed(0)
    method = random_method("global_rm", rm.model.config.hidden_size)
    prompts = prompts_of(policy, TEXTS[:3])
    guide = RewardGuide(rm, method, ["u"] * 3, lam=1.0, top_k=5)
    batched = GraphedArgs().decode(policy, guide, prompts, 16)
    alone = [GraphedArgs().decode(policy, RewardGuide(rm, method, ["u"], lam=1.0, top_k=5), [p], 16)[0]
             for p in prompts]
    assert batched == alone


def test_a_kept_step_serves_later_decodes_of_its_shape(models):
    """Later decodes of the same rows and slot bucket load their prefill into the kept buffers (on CUDA: replay
    the kept graph) and still write what the eager loop writes, whatever was decoded before."""
    policy, rm = models
    torch.manual_seed(3)
    method = random_method("global_rm_v2", rm.model.config.hidden_size)
    graphs = GraphedArgs()
    for texts, users in ((TEXTS[:2], ["a", "b"]), (TEXTS[2:], ["c", "a"]), (TEXTS[1:3], ["b", "b"])):
        guide = RewardGuide(rm, method, users, lam=[1.0, 3.0], top_k=4)
        prompts = prompts_of(policy, texts)
        assert graphs.decode(policy, guide, prompts, 16) == args_decode(policy, guide, prompts, 16)
    assert len(graphs.replayers) == 1


def test_a_shared_backbone_is_refused_in_one_line(models):
    policy, _ = models
    method = random_method("global_rm", policy.model.config.hidden_size)
    with pytest.raises(ConfigError, match="own backbone"):
        GraphedArgs().decode(policy, RewardGuide(policy, method, ["u"], lam=1.0, top_k=3), prompts_of(policy, ["x"]), 4)


def test_a_run_with_cuda_graph_reports_the_eager_runs_numbers(tmp_path, cache_dir, monkeypatch):
    """`args.cuda_graph: true`: the LoRA RM's ARGS cell decodes its λ grid (the harmonic rule's validation
    decodes) and its query outputs through GraphedArgs (uncaptured here), and every reported number, the λ
    chosen and every generation equal the eager run's (float32)."""
    from tests.test_same_numbers import lora_run

    decodes = []
    real = GraphedArgs.decode
    monkeypatch.setattr(GraphedArgs, "decode", lambda self, policy, guide, *a: decodes.append(guide.lam)
                        or real(self, policy, guide, *a))
    choice = ["args.selection=harmonic", "args.lambdas=[0.0, 1.0, 3.0]", "args.validation_size=4"]
    eager = lora_run(tmp_path / "eager", *choice)
    assert not decodes
    graphed = lora_run(tmp_path / "graphed", *choice, "args.cuda_graph=true")
    assert any(isinstance(lam, list) for lam in decodes), "the λ grid (a λ per row) should be decoded graphed"
    assert any(not isinstance(lam, list) for lam in decodes), "the query batches should be decoded graphed"
    assert graphed == eager


def test_a_graphed_decode_meters_every_step_it_computes(models):
    """Metered work (engine/work_meter.py) of a graphed decode: each step's policy forward of one token and RM
    forward of k candidates per row, over every slot of the buffers (what a step computes), counted once per
    step — the first by the meter's hooks, the later ones (a replayed graph runs no hook) by their measured
    amount. Checked against the cost formula; on CUDA the replayed steps take the same path."""
    from persalign.engine.cost import ModelShape, forward_flops, shape_of
    from persalign.engine.work_meter import WorkMeter

    policy, rm = models
    torch.manual_seed(3)
    method = random_method("global_rm", rm.model.config.hidden_size)
    meter = WorkMeter()
    meter.watch(policy.model)
    meter.watch(rm.model)
    graphs = GraphedArgs(meter)
    prompts, k, new = prompts_of(policy, TEXTS), 4, 16
    rows = graphs.decode(policy, RewardGuide(rm, method, ["u"] * 4, lam=1.0, top_k=k), prompts, new)
    steps = min(new, max(len(row) + 1 for row in rows))
    (replayer,) = graphs.replayers.values()
    slots = replayer.state.slots.numel()
    body = {name: (lambda s: ModelShape(s.body_params, 0.0, s.layers, s.width))(shape_of(lm.model))
            for name, lm in (("policy", policy), ("rm", rm))}
    per_step = len(prompts) * (forward_flops(body["policy"], 1, slots) + forward_flops(body["rm"], k, slots)
                               + 2.0 * shape_of(policy.model).head_params)  # the policy's head: one row each
    width, head = max(map(len, prompts)), 2.0 * shape_of(policy.model).head_params
    prefill = len(prompts) * (forward_flops(body["policy"], width) + forward_flops(body["rm"], width) + head)
    assert meter.flops == pytest.approx(prefill + steps * per_step, rel=1e-12)
    meter.flops = 0.0
    graphs.decode(policy, RewardGuide(rm, method, ["u"] * 4, lam=1.0, top_k=k), prompts, new)  # the kept step
    assert meter.flops == pytest.approx(prefill + steps * per_step, rel=1e-12)

"""The work meter (issue #31, point 1): each forward's FLOPs from its shapes, attributed to the run's stages."""

import pytest
import torch

from persalign.engine.cost import ModelShape, forward_flops, shape_of
from persalign.engine.work_meter import TRAINING_FACTOR, WorkMeter
from tests.test_runner import tiny_config


def body_of(model) -> ModelShape:
    shape = shape_of(model)
    return ModelShape(shape.body_params, 0.0, shape.layers, shape.width)


def test_a_forward_and_a_cached_step_are_metered_from_their_shapes(tiny_lm):
    model, meter = tiny_lm.model, WorkMeter()
    meter.watch(model)
    meter.watch(model)  # once per model: a second watch adds no second hook
    ids = torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    head = shape_of(model).head_params
    assert meter.flops == pytest.approx(2 * forward_flops(body_of(model), 7, 0) + 2 * head * 2)
    before = meter.flops
    with torch.no_grad():
        model(input_ids=ids[:, :1], past_key_values=out.past_key_values, use_cache=True)
    assert meter.flops - before == pytest.approx(2 * forward_flops(body_of(model), 1, 7) + 2 * head * 2)


def test_a_forward_with_gradients_counts_its_backward(tiny_lm):
    meter, ids = WorkMeter(), torch.randint(5, 100, (1, 4))
    meter.watch(tiny_lm.model)
    tiny_lm.model(input_ids=ids, logits_to_keep=1)
    expected = forward_flops(body_of(tiny_lm.model), 4, 0) + 2 * shape_of(tiny_lm.model).head_params
    assert meter.flops == pytest.approx(TRAINING_FACTOR * expected)
    record = {}
    with meter.measure(record, "stage"), torch.no_grad():
        tiny_lm.model(input_ids=ids, logits_to_keep=1)
    assert record["stage"] == pytest.approx(expected)


def test_every_cell_records_its_stages_work_and_training_and_the_lambda_choice_theirs(tmp_path, cache_dir):
    from persalign.runner.run import run

    config = tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]",
                         "reward.epochs=2", "args.lambdas=[0, 1]", "args.selection=policy_accuracy")
    store = run(config, tmp_path / "run", log=lambda *_: None)
    cells = {m["decoder"]: m for m in store.all_metrics()}
    zero, args = cells["Zero-Shot"], cells["Global RM"]
    counted = zero["counted_work"]["flops_per_output"] * zero["counted_work"]["outputs"]
    # the meter sees what counted work states plus the padding of each batch
    assert counted <= zero["stage_flops"]["generation_flops"] <= 2 * counted
    assert zero["stage_flops"]["scoring_flops"] > 0
    # ARGS decodes in the policy's shared pass (issue #42): shared work, charged to the first cell that needs it
    assert args["stage_flops"]["generation_flops"] == 0 and args["stage_shared_flops"]["generation_shared_flops"] > 0
    training = args["settings"]["training"]
    assert training["features_flops"] > 0 and "training_flops" in training
    # policy_accuracy reads the memoised log-probs and cached features only: shared work, none of its own
    assert args["settings"]["lambda_flops"] == 0 and args["settings"]["lambda_shared_flops"] > 0


def test_a_cell_run_again_in_a_fresh_process_meters_the_same_own_work(tmp_path, cache_dir):
    """A resumed run has lost the in-memory memos (policy log-probs, the λ choice's greedy batches and
    prefills): the cell it reruns must still meter what the uninterrupted run metered (#43: they differed
    by the memoised work); the recomputed memo entries are shared work, stored apart."""
    import shutil

    from persalign.runner.run import run
    from persalign.runner.store import Cell

    config = tiny_config("seeds=[0, 1]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]",
                         "reward.epochs=1", "args.lambdas=[0, 1]", "args.selection=policy_accuracy")
    store = run(config, tmp_path / "run", log=lambda *_: None)
    before = {(m["decoder"], m["seed"]): m for m in store.all_metrics()}
    second = store.cell_dir(Cell(config.policies[0], "Global RM", 1))
    assert before[("Global RM", 0)]["stage_shared_flops"]  # the first ARGS cell filled the memo
    shutil.rmtree(second)  # as if killed in that cell: a fresh process runs it again with empty memos
    after = {(m["decoder"], m["seed"]): m for m in run(config, tmp_path / "run", log=lambda *_: None).all_metrics()}
    for key, metrics in before.items():
        assert after[key]["stage_flops"] == metrics["stage_flops"], key
        assert after[key]["settings"].get("lambda_flops") == metrics["settings"].get("lambda_flops"), key
    assert after[("Global RM", 1)]["stage_shared_flops"]  # it computed the memo again: shared work done

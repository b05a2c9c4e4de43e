"""Counted costs (issue #28): the verdict's cost is counted work, a property of the method, not of the run.

Before, "cost ÷ greedy" came from each cell's own seconds: two global RMs that
chose λ = 0 and wrote identical outputs showed 3.1× and 1.7× in the fresh
demo, and which personalized method ran first absorbed the support features.
"""

import math

from persalign.core.config import load_config
from persalign.engine.cost import ModelShape, args_work, cell_work, forward_flops, greedy_work, shape_of, steps_of
from persalign.engine.decoding import decode, greedy
from persalign.runner.run import run
from persalign.runner.store import Cell

TINY = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
        "generation.max_new_tokens=5", "generation.batch_size=4", "split.max_query_per_user=3",
        "decoders=[{name: zero_shot}]", "args.selection=fixed", "args.fixed_lambda=0.0", "reward.epochs=2"]
TWO_RMS = "methods=[{name: global_rm, label: RM A}, {name: global_rm, label: RM B}, {name: mpu}, {name: pal}]"
REVERSED = "methods=[{name: pal}, {name: mpu}, {name: global_rm, label: RM B}, {name: global_rm, label: RM A}]"


def costs(store) -> dict:
    out = {}
    for m in store.all_metrics():
        adapt = ((m.get("settings") or {}).get("training") or {}).get("adapt_work")
        out[m["decoder"]] = (m["counted_work"]["flops_per_output"], adapt and adapt["flops_per_user"])
    return out


def test_identical_outputs_cost_the_same_and_the_order_of_methods_changes_no_cost(tmp_path, cache_dir):
    first = run(load_config("demo-baselines", TINY + [TWO_RMS]), tmp_path / "a", log=lambda *_: None)
    second = run(load_config("demo-baselines", TINY + [REVERSED]), tmp_path / "b", log=lambda *_: None)
    a, b = costs(first), costs(second)
    assert a == b  # generation and adaptation, every deployment, whichever order the methods ran in
    rows = {m["decoder"]: [r["generation"] for r in first.read_rows(Cell(m["policy"], m["decoder"], m["seed"]))]
            for m in first.all_metrics()}
    assert rows["RM A"] == rows["RM B"] and a["RM A"] == a["RM B"]
    # λ = 0 switches the reward off: greedy decoding, greedy's counted cost (it used to count k candidates a step)
    assert a["RM A"][0] == a["Zero-Shot"][0] and rows["RM A"] == rows["Zero-Shot"]


def test_decode_steps_are_counted_as_the_decoder_takes_them(tiny_lm):
    calls = []

    def counting(logprobs, step):
        calls.append(step)
        return greedy(logprobs, step)

    for text in ("article one", "a much longer article about the river and the market"):
        for cap in (1, 3, 8):
            calls.clear()
            (ids,) = decode(tiny_lm, [tiny_lm.tokenizer(text)["input_ids"]], counting, cap)
            assert steps_of(len(ids), cap) == len(calls)


def test_forward_counts_by_hand():
    shape = ModelShape(body_params=100.0, head_params=10.0, layers=2, width=3)
    # 4 tokens, none cached: 2·100·4 + 4·2·3·(1+2+3+4) + 2·10·1 logits row
    assert forward_flops(shape, 4, 0, 1) == 800 + 240 + 20
    work = greedy_work(shape, prompt=4, generated=2, max_new_tokens=5)  # 3 steps: prefill + 2 one-token forwards
    assert (work.prefill_tokens, work.decode_tokens) == (4, 2)
    assert work.flops == forward_flops(shape, 4, 0, 1) + forward_flops(shape, 1, 4, 1) + forward_flops(shape, 1, 5, 1)
    head = ModelShape(0.0, 7.0, 0, 0)
    shared = args_work({"policy": shape, "reward": None, "head": head}, 4, 2, 5, top_k=3, token_level=False)
    assert (shared.prefill_tokens, shared.decode_tokens, shared.candidate_tokens) == (4, 0, 9)
    separate = args_work({"policy": shape, "reward": shape, "head": head}, 4, 2, 5, top_k=3, token_level=False)
    assert separate.decode_tokens == 2 and separate.reward_tokens == 4 and separate.flops > shared.flops


def test_the_shape_of_a_model_excludes_the_embedding_lookup(tiny_lm):
    shape = shape_of(tiny_lm.model)
    total = sum(p.numel() for p in tiny_lm.model.parameters())
    embedding = tiny_lm.model.get_input_embeddings().weight.numel()
    assert shape.body_params == total - embedding - (0 if tiny_lm.model.config.tie_word_embeddings else shape.head_params)
    assert shape.layers == tiny_lm.model.config.num_hidden_layers and shape.head_params > 0


def test_a_method_deployed_twice_is_trained_once_in_every_total(tmp_path, cache_dir):
    """ARGS and Best-of-N of one method share one trained model; the cost table's total (and bench_floor's
    metered work) counted its features, training and adaptation once per cell: 25.9 min for a 24.0-min run."""
    import time

    from persalign.report.markdown import results_frame, stage_totals

    started = time.perf_counter()
    store = run(load_config("demo-baselines", TINY + ["methods=[{name: lore}]", "best_of_n.enabled=true",
                                                       "best_of_n.ns=[1,2]"]), tmp_path / "run", log=lambda *_: None)
    wall = time.perf_counter() - started
    frame = results_frame(store)
    lore = frame[frame["decoder"].str.startswith("LoRE")]
    assert len(lore) == 2 and lore.iloc[0]["settings"]["training"] == lore.iloc[1]["settings"]["training"]
    training = lore.iloc[0]["settings"]["training"]
    totals = stage_totals(frame)
    assert totals["training"] == training["fit_s"] and totals["adaptation"] == training["adapt_s"]
    assert totals["features"] == training["features_s"]
    assert sum(totals.values()) <= wall


def test_a_cells_counted_work_is_the_exactly_rounded_sum_on_every_python():
    """ICL's shared demonstration block gives each output a fraction of its prefill (1/3 of 1000 tokens here):
    a left-to-right float sum of those shares rounds differently on Python 3.11 and 3.12 (3.12's built-in sum
    compensates its rounding; the H200 host's Python 3.12 reported 2657.0 prefill tokens where 3.11 reported
    2656.9999999999995). The totals are the exactly rounded sums, the same on every Python."""
    rows = [{"work_prefill_tokens": 90 + 1000 / 3, "work_decode_tokens": 4, "work_candidate_tokens": 0,
             "work_reward_tokens": 0, "work_flops": 1e6 / 3 + 0.1} for _ in range(9)]
    work = cell_work(rows)
    assert work["prefill_tokens"] == math.fsum(r["work_prefill_tokens"] for r in rows)
    assert work["flops_per_output"] == math.fsum(r["work_flops"] for r in rows) / 9
    naive = 0.0
    for r in rows:  # what Python 3.11's sum computes
        naive += r["work_prefill_tokens"]
    assert naive != math.fsum(r["work_prefill_tokens"] for r in rows)  # the rows are ones where it matters

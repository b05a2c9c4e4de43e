"""Token-budget, length-sorted batching (issue #19): budgets respected, nothing dropped, order restored."""

import numpy as np
import pytest

from persalign.core.config import load_config
from persalign.engine.batching import map_batched, padding_ratio, plan_batches, row_cost
from persalign.engine.scoring import response_logprobs


def test_batches_are_sorted_within_budget_and_cover_every_item_once():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(3, 200, size=300)]
    batches = plan_batches(lengths, budget=2000, max_items=16)
    assert sorted(i for b in batches for i in b) == list(range(300))
    for batch in batches:
        width = max(lengths[i] for i in batch)
        assert len(batch) <= 16 and (len(batch) == 1 or len(batch) * row_cost(width) <= 2000)
    widths = [max(lengths[i] for i in b) for b in batches]
    assert widths == sorted(widths)
    in_data_order = [list(range(s, min(s + 16, 300))) for s in range(0, 300, 16)]
    assert padding_ratio(lengths, batches) < 1.1 < padding_ratio(lengths, in_data_order)


def test_an_item_over_the_budget_gets_a_batch_of_its_own():
    assert plan_batches([10, 5000, 12], budget=100) == [[0, 2], [1]]


def test_same_length_batches_hold_one_length_and_still_respect_the_caps():
    lengths = [7, 3, 7, 3, 3, 9, 7]
    batches = plan_batches(lengths, budget=1000, max_items=2, same_length=True)
    assert batches == [[1, 3], [4], [0, 2], [6], [5]]
    assert padding_ratio(lengths, batches) == 1.0


def test_results_come_back_in_the_original_order():
    items = ["ccc", "a", "bbbbb", "dd"]
    seen = []

    def run(batch):
        seen.append(batch)
        return [x.upper() for x in batch]

    assert map_batched(items, [len(x) for x in items], run, budget=8) == ["CCC", "A", "BBBBB", "DD"]
    assert seen[0][0] == "a"  # shortest first


def test_logprobs_do_not_depend_on_the_budget(tiny_lm):
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(5, 90, size=n)) for n in (3, 17, 6, 30, 9)]
    responses = [list(rng.integers(5, 90, size=n)) for n in (4, 2, 7, 1, 5)]
    one_by_one = response_logprobs(tiny_lm, prompts, responses, batch_size=1)
    budgeted = response_logprobs(tiny_lm, prompts, responses, batch_size=16, token_budget=60)
    for a, b in zip(one_by_one, budgeted):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5)


def test_a_run_made_before_the_token_budget_existed_resumes_unless_it_is_set(tmp_path):
    from persalign.core.config import load_config
    from persalign.core.errors import ConfigError
    from persalign.core.typed_yaml import to_dict
    from persalign.runner.store import RunStore

    store = RunStore(tmp_path / "run")
    old = to_dict(load_config("demo-baselines"))
    del old["generation"]["token_budget"]  # as written by a version without the setting
    store.prepare(old, {})
    store.prepare(to_dict(load_config("demo-baselines")), {})  # unset: the same config
    with pytest.raises(ConfigError, match="different config"):
        store.prepare(to_dict(load_config("demo-baselines", ["generation.token_budget=512"])), {})


def test_a_run_made_before_a_switch_existed_resumes_while_it_is_off(tmp_path):
    """`make demo` on a run dir from before `generation.cuda_graph` (default false) stopped with "a different
    config (generation.cuda_graph: None → False)" (2026-11-29); switched on it is a different config."""
    from persalign.core.config import load_config
    from persalign.core.errors import ConfigError
    from persalign.core.typed_yaml import to_dict
    from persalign.runner.store import RunStore

    store = RunStore(tmp_path / "run")
    old = to_dict(load_config("demo-baselines"))
    del old["generation"]["cuda_graph"]
    store.prepare(old, {})
    store.prepare(to_dict(load_config("demo-baselines")), {})
    with pytest.raises(ConfigError, match="different config"):
        store.prepare(to_dict(load_config("demo-baselines", ["generation.cuda_graph=true"])), {})


def _lambda_zero_decodes(monkeypatch, tmp_path, methods: str) -> tuple[int, dict]:
    """Run a tiny config where every method has λ = 0; how many ARGS batches were decoded at λ = 0."""
    from persalign.decoders import args_decoding
    from persalign.runner.run import run
    from tests.golden import view

    calls = []
    real = args_decoding.make_scorer
    monkeypatch.setattr(args_decoding, "make_scorer", lambda policy, guide, prompts: calls.append(guide.lam) or
                        real(policy, guide, prompts))
    overrides = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
                 "generation.max_new_tokens=6", "generation.batch_size=4", "split.max_query_per_user=3",
                 "decoders=[{name: zero_shot}]", f"methods={methods}", "reward.epochs=3", "args.lambdas=[0.0]",
                 "args.selection=harmonic", "args.validation_size=4"]
    out = tmp_path / f"run-{methods.count('name')}-methods"
    run(load_config("demo-baselines", overrides), out, log=lambda *_: None)
    return calls.count(0.0), view(out)


def test_args_at_lambda_zero_is_decoded_once_per_policy_not_per_method(monkeypatch, tmp_path, cache_dir):
    """Issue #19: ARGS at λ = 0 is greedy; the λ choice's validation batches are decoded once per policy,
    whatever the number of reward methods. A deployment whose λ is 0 decodes greedily (issue #39: the reward
    is switched off, no candidate is scored), with the zero-shot outputs."""
    one, _ = _lambda_zero_decodes(monkeypatch, tmp_path, "[{name: global_rm}]")
    two, results = _lambda_zero_decodes(monkeypatch, tmp_path, "[{name: global_rm}, {name: lore}]")
    assert one >= 1 and two == one, (one, two)  # the validation batches alone
    generations = {label: [row["generation"] for row in cell["rows"]] for label, cell in results.items()}
    assert generations["Global RM | seed 0"] == generations["LoRE | seed 0"] == generations["Zero-Shot | seed 0"]


def test_a_cell_runs_in_length_sorted_budget_batches_and_stores_rows_in_example_order(tmp_path, cache_dir):
    """Issue #19: the one evaluator batches a cell's examples by prompt length within the token budget
    (before: fixed batches in data order), and rows.jsonl keeps the examples' order whatever the batching.
    ICL (issue #31) takes its users one after another (their queries share a cached prefix), shortest
    first within each user."""
    from persalign.runner.resolve import resolve_run
    from persalign.runner.run import open_store, run, run_context
    from persalign.runner.store import Cell

    overrides = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
                 "generation.max_new_tokens=4", "generation.batch_size=8", "generation.token_budget=800",
                 "split.max_query_per_user=4", "decoders=[{name: zero_shot}, {name: icl, shots: 2}]"]
    config = load_config("demo-baselines", overrides)
    store = run(config, tmp_path / "run", log=lambda *_: None)
    examples = run_context(config, open_store(resolve_run(config), tmp_path / "run", lambda *_: None)[0], lambda *_: None).examples
    for decoder in ("Zero-Shot", "ICL (2-shot)"):
        rows = store.read_rows(Cell("tiny-llama", decoder, 0))
        assert [row["id"] for row in rows] == [ex.id for ex in examples]
        batches: dict[int, list[dict]] = {}
        for row in rows:
            batches.setdefault(row["batch"], []).append(row)
        ordered = [batches[b] for b in sorted(batches)]
        assert len(ordered) > 2
        for batch in ordered:
            widths = [row["prompt_tokens"] + 4 for row in batch]
            assert len(batch) <= 8 and (len(batch) == 1 or len(batch) * row_cost(max(widths)) <= 800)
        if decoder == "Zero-Shot":  # shortest prompts first
            assert all(max(r["prompt_tokens"] for r in a) <= min(r["prompt_tokens"] for r in b)
                       for a, b in zip(ordered, ordered[1:]))
        else:  # user by user, shortest first within each
            taken = [(row["user"], row["prompt_tokens"]) for batch in ordered
                     for row in sorted(batch, key=lambda r: (r["user"], r["prompt_tokens"]))]
            assert taken == sorted(taken)


def test_best_of_n_samples_do_not_depend_on_how_a_cell_is_batched(tmp_path, tiny_lm):
    """Issue #19: samples are drawn in fixed groups of the run's examples, so asking for them in other
    batches (another token budget, another deployment's prompt lengths) draws the same texts
    (before: one generator per evaluator batch, keyed by its first example)."""
    from persalign.core.config import BestOfNConfig
    from persalign.core.prompts import PromptFormatter
    from persalign.core.records import Comparison
    from persalign.decoders.best_of_n_samples import SampleStore
    from persalign.runner.evaluate import Example

    examples = [Example(Comparison(f"q{i}", f"u{i % 2}", f"prompt number {i} " * (1 + i % 3), "a", "b"), None)
                for i in range(6)]
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline", 200)

    def store(name):
        return SampleStore(tmp_path / name, tiny_lm, formatter, [], BestOfNConfig(enabled=True, ns=[1, 2]), 5,
                           [examples[:4], examples[4:]])

    whole = store("whole").get(examples, seed=3)
    parts = store("parts")
    pieces = parts.get([examples[5], examples[0]], seed=3) + parts.get(examples[1:5], seed=3)
    by_id = {r["id"]: r["samples"] for r in pieces}
    assert [r["samples"] for r in whole] == [by_id[ex.id] for ex in examples]

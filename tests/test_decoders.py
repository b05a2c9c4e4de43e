"""ICL demonstrations come from the user's own support set only, deterministically."""

from types import SimpleNamespace

import pytest

from persalign.core.config import DataConfig, DecoderConfig, SplitConfig, load_config
from persalign.core.errors import ConfigError
from persalign.core.registry import DATASETS, DECODERS
from persalign.data.preflamp import build_pref_lamp
from persalign.data.split import make_split
from persalign.data.writing import keep_active_users
from persalign.decoders.base import EvalContext
from persalign.models.embedders import CachedEmbedder, HashingBowEmbedder
from persalign.runner.plan import PlannedCell, plan
from persalign.runner.store import Cell


@pytest.fixture(scope="module")
def context():
    writing = keep_active_users(DATASETS.get("demo")(DataConfig()), DataConfig())
    embedder = CachedEmbedder(HashingBowEmbedder(), None)
    dataset = build_pref_lamp(writing, embedder, SplitConfig(adapt_fraction=0.25), top_k=5, seed=0)
    return EvalContext(dataset, make_split(dataset, SplitConfig(adapt_fraction=0.25)), embedder)


def deployment(context, name: str, shots: int, seed: int = 0):
    """A decoder built for one cell, with only what choosing demonstrations needs in its context."""
    planned = PlannedCell(Cell("policy", name, seed), name, 0, decoder_config=DecoderConfig(name, shots=shots))
    ctx = SimpleNamespace(planned=planned, cell=planned.cell, seed=seed, run=SimpleNamespace(eval_context=context),
                          policy=SimpleNamespace(lm=None, formatter=None))
    return DECODERS.get(name)(ctx)


def example(user, item):
    return SimpleNamespace(id=item.id, comparison=SimpleNamespace(user=user, prompt=item.input))


def query_items(context):
    return [(u, context.items[i]) for u in context.split.adapt_users for i in context.split.query[u]]


@pytest.mark.parametrize("name", ["icl", "icl_rag"])
def test_demos_are_the_users_own_support_items(context, name):
    decoder = deployment(context, name, 4)
    for user, item in query_items(context):
        demos = decoder.demos(example(user, item))
        assert len(demos) == 4
        assert all(d.user == user for d in demos)
        assert all(d.id in context.split.support[user] for d in demos)
        assert item.id not in {d.id for d in demos}


def test_random_icl_is_seeded_per_example(context):
    user, item = query_items(context)[0]
    first = deployment(context, "icl", 3).demos(example(user, item))
    assert first == deployment(context, "icl", 3).demos(example(user, item))
    draws = {tuple(d.id for d in deployment(context, "icl", 3, seed=s).demos(example(user, item))) for s in range(6)}
    assert len(draws) > 1


def test_rag_returns_the_most_similar_items_first(context):
    user, item = query_items(context)[0]
    demos = deployment(context, "icl_rag", 3).demos(example(user, item))
    pool = context.demo_pool(user)
    vectors = context.embedder.encode([item.input] + [p.input for p in pool])
    sims = sorted((float(vectors[1 + j] @ vectors[0]) for j in range(len(pool))), reverse=True)
    got = [float(context.embedder.encode([d.input])[0] @ vectors[0]) for d in demos]
    assert got == pytest.approx(sims[:3])


def test_shots_must_be_positive():
    with pytest.raises(ConfigError, match="shots must be >= 1"):
        plan(load_config("demo-baselines", ["decoders=[{name: icl, shots: 0}]"]))


@pytest.mark.parametrize("entry, message", [
    ("{name: zero_shot, shots: 4}", "zero_shot: takes no demonstrations, so shots would be ignored"),
    ("{name: zero_shot, draw: per_user}", "zero_shot: takes no demonstrations, so draw would be ignored"),
    ("{name: icl_rag, shots: 2, draw: per_user}", "icl_rag: draw must be one of \\['per_query'\\]"),
    ("{name: icl, shots: 2, draw: per_item}", "decoders\\[0\\].draw"),
])
def test_demonstration_settings_a_decoder_cannot_use_are_refused(entry, message):
    """Issue #31: `draw` is new; a zero-shot entry with shots or draw was silently run without them."""
    with pytest.raises(ConfigError, match=message):
        plan(load_config("demo-baselines", [f"decoders=[{entry}]"]))


def test_demos_dropped_to_fit_the_prompt_budget_are_not_reported_as_used(tmp_path, cache_dir):
    """Issue #29 (a): with a prompt budget below a demonstration's length, ICL rows were byte-identical to
    zero-shot while `demo_ids` listed 4 demonstrations and the report said "ICL (4-shot)"."""
    from persalign.core.config import load_config
    from persalign.report.markdown import build_report
    from persalign.runner.run import run
    from persalign.runner.store import Cell

    overrides = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
                 "generation.max_new_tokens=3", "split.max_query_per_user=2", "generation.max_prompt_tokens=60",
                 "decoders=[{name: zero_shot}, {name: icl, shots: 4}]"]
    store = run(load_config("demo-baselines", overrides), tmp_path / "run", log=lambda *_: None)
    icl = next(m for m in store.all_metrics() if m["decoder_name"] == "icl")
    rows = store.read_rows(Cell(icl["policy"], icl["decoder"], icl["seed"]))
    assert all(len(r["demo_ids"]) + r["demos_dropped"] == 4 for r in rows)
    assert icl["demos_used_mean"] == sum(len(r["demo_ids"]) for r in rows) / len(rows) < 4
    assert icl["prompts_cut"] == sum(1 for r in rows if r["demos_dropped"]) > 0
    assert "prompts cut to fit generation.max_prompt_tokens" in build_report(store.root)

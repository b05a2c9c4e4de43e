"""Several policy models in one run (issue #40): every policy gets its own trained parts, and reward models are
shared only between policies of one tokenizer.

Before: trained models were keyed by method and seed, so a second policy loaded the first one's P-DPO soft
tokens (one models/P-DPO/seed-0 folder, exit 0; a traceback at another width), and a reward model read a
policy of another tokenizer as unreadable text.
"""

import pytest

from persalign.core.config import load_config
from persalign.core.errors import ConfigError
from persalign.core.registry import MODELS
from persalign.models.aliases import ModelAlias
from persalign.runner.run import run
from tests.test_runner import TINY


@pytest.fixture
def more_tiny_models(monkeypatch):
    """A wider tiny Llama with the same tokenizer, and one with another vocabulary (test-only aliases)."""
    from persalign.models.tiny import tiny_llama

    for name, build in (("tiny-llama-128", lambda: tiny_llama(seed=1, hidden_size=128)),
                        ("tiny-llama-other-vocab", lambda: tiny_llama(seed=2, extra_specials=("<x>",)))):
        monkeypatch.setitem(MODELS._entries, name, ModelAlias("test model", "causal-lm", build=build))


def config_for(policies: str, *extra):
    return load_config("demo-baselines", TINY + [f"policies={policies}", "decoders=[{name: zero_shot}]",
                                                 "methods=[{name: pdpo, max_steps: 2, adapt_epochs: 1}, "
                                                 "{name: global_rm}]", "reward.backbone=tiny-llama",
                                                 "reward.epochs=1", "args.selection=fixed", *extra])


def cells_of(store, policy: str) -> dict:
    """Each cell of `policy`: its numbers (timings dropped) and its rows' outputs and pair scores."""
    from persalign.runner.store import Cell

    out = {}
    for m in store.all_metrics():
        if m["policy"] == policy:
            rows = store.read_rows(Cell(policy, m["decoder"], m["seed"]))
            out[m["decoder"]] = ({k: m[k] for k in ("rouge1", "policy_accuracy", "rm_accuracy", "examples") if k in m},
                                 [(r["id"], r["generation"], r.get("policy_correct")) for r in rows])
    return out


@pytest.mark.slow
def test_each_policy_gets_its_own_trained_parts_equal_to_running_it_alone(tmp_path, cache_dir, more_tiny_models):
    both = run(config_for("[tiny-llama, tiny-llama-128]"), tmp_path / "both", log=lambda *_: None)
    alone = run(config_for("[tiny-llama-128]"), tmp_path / "alone", log=lambda *_: None)
    for policy in ("tiny-llama", "tiny-llama-128"):
        assert (both.root / "models" / policy / "P-DPO" / "seed-0" / "head.json").exists()
    assert set(cells_of(both, "tiny-llama-128")) == {"Zero-Shot", "P-DPO", "Global RM"}
    assert cells_of(both, "tiny-llama-128") == cells_of(alone, "tiny-llama-128")


def test_a_policy_of_another_tokenizer_is_refused_before_any_work(tmp_path, cache_dir, more_tiny_models):
    with pytest.raises(ConfigError, match="'tiny-llama-other-vocab' does not share the tokenizer of the reward "
                                          "backbone 'tiny-llama'"):
        run(config_for("[tiny-llama, tiny-llama-other-vocab]"), tmp_path / "run", log=lambda *_: None)
    assert not (tmp_path / "run").exists()

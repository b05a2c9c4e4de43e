"""Resolve once, then flow down (issue #53): `persalign run` checks a config once, plans its cells once and reads
each model's config once, before the run folder is touched; the later stages take what was resolved.

On commit ec6c440 (before this change) a one-policy run planned its cells three times (the checks, the store, the
counted work) and read the policy's config three times (a method's size, the vocabulary and context, the
counted work): this test failed there.

    pytest tests/test_resolve.py
"""

from __future__ import annotations

from collections import Counter

import pytest

from persalign.core.config import load_config
from persalign.core.errors import ConfigError
from persalign.core.registry import MODELS
from persalign.models.aliases import ModelAlias, _tiny
from persalign.runner import plan as plan_module
from persalign.runner.resolve import resolve_run
from persalign.runner.run import run
from tests.test_runner import TINY

ONE_SEED = [a for a in TINY if not a.startswith(("seeds", "policies"))] + [
    "seeds=[0]", "policies=[tiny-counted]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]",
    "reward.epochs=1", "args.selection=fixed", "best_of_n.enabled=false"]


@pytest.fixture
def counted(monkeypatch):
    """A tiny policy whose config reads are counted, and a count of the plans made."""
    reads = Counter()

    def config():
        reads["model config"] += 1
        return _tiny()[0].config

    MODELS.discover()
    monkeypatch.setitem(MODELS._entries, "tiny-counted", ModelAlias("counted tiny Llama", "causal-lm", build=_tiny,
                                                                     config=config))
    baseline_cells = plan_module.baseline_cells

    def counting(config, policy):
        reads["plan"] += 1
        return baseline_cells(config, policy)

    monkeypatch.setattr(plan_module, "baseline_cells", counting)
    return reads


def test_a_run_plans_once_and_reads_each_model_config_once(counted, tmp_path):
    run(load_config("demo-baselines", ONE_SEED), tmp_path / "run", log=lambda *_: None)
    assert counted == {"plan": 1, "model config": 1}


def test_the_resolved_run_holds_the_cells_and_configs_the_stages_read(counted):
    resolved = resolve_run(load_config("demo-baselines", ONE_SEED))
    assert [p.cell.decoder for p in resolved.cells] == ["Zero-Shot", "Global RM"]
    assert list(resolved.model_configs) == ["tiny-counted"] and resolved.cells_of("other") == []


def test_a_refused_config_leaves_no_run_folder(counted, tmp_path):
    with pytest.raises(ConfigError, match="config.args.top_k: 100000 is not allowed"):
        run(load_config("demo-baselines", ONE_SEED + ["args.top_k=100000"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_command_line_checks_the_config_values_once(counted, tmp_path, monkeypatch):
    """`persalign run` (and `persalign study`, the API from a file): load_config checks the values, resolve_run
    does not again (before this change, 3947569, `validate` ran twice on this path: in load_config and in
    resolve_run; this test failed there, 2 == 1). A RunConfig built or changed in code is still checked."""
    from persalign.cli.commands import main
    from persalign.core import config_checks
    from persalign.runner import resolve as resolve_module

    calls = Counter()
    checked = config_checks.validate

    def counting(config, where="config"):
        calls["validate"] += 1
        return checked(config, where)

    monkeypatch.setattr(config_checks, "validate", counting)
    monkeypatch.setattr(resolve_module, "validate", counting)
    main(["run", "demo-baselines", *ONE_SEED, "-o", str(tmp_path / "cli"), "--quiet"])
    assert calls["validate"] == 1
    config = load_config("demo-baselines", ONE_SEED)
    resolve_run(config, values_checked=True)
    assert calls["validate"] == 2
    resolve_run(config)  # a RunConfig that may have been built or changed in code: checked here
    assert calls["validate"] == 3

"""`generate` with a finished run's deployments (issue #54): for a query of the run it gives back the stored
generation exactly, for every deployment kind; a new prompt is generated for the same user; what cannot be
generated is refused in one line.

    pytest tests/test_generate.py
"""

from __future__ import annotations

import pytest

import persalign
from persalign.core.config import load_config
from persalign.core.errors import ConfigError
from tests.bad_input_helpers import cli_error
from tests.test_runner import TINY

KINDS = [a for a in TINY if not a.startswith("seeds")] + [
    "seeds=[0]", "decoders=[{name: zero_shot}, {name: icl, shots: 2}, {name: icl_rag, shots: 2}]",
    "methods=[{name: global_rm}, {name: lore}, {name: pdpo, max_steps: 2, adapt_epochs: 1}]", "reward.epochs=3",
    "args.selection=fixed", "args.fixed_lambda=1.0", "best_of_n.enabled=true", "best_of_n.ns=[1,2]"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return persalign.run(load_config("demo-baselines", KINDS), tmp_path_factory.mktemp("gen") / "run")


def test_every_deployment_gives_back_its_stored_generation(finished):
    rows = finished.rows()
    kinds = set()
    for label, group in rows.groupby("deployment"):
        first = group.iloc[0]
        deployment = finished.deployment(label)
        assert deployment.generate(first["user"], [first["prompt"]]) == [first["generation"]], label
        kinds.add(deployment.planned.decoder)
    assert kinds == {"zero_shot", "icl", "icl_rag", "args", "best_of_n", "soft_prompt"}, kinds


def test_a_new_prompt_is_generated_for_the_user_and_best_of_n_refuses_it(finished):
    user = finished.rows()["user"].iloc[0]
    (text,) = finished.deployment("ICL (2-shot)").generate(user, ["A brand new story about the harbour"])
    assert isinstance(text, str)
    with pytest.raises(ConfigError, match="Best-of-N reranks the samples the run drew"):
        finished.deployment("Global RM (Best-of-N)").generate(user, ["A brand new story"])
    with pytest.raises(ConfigError, match="not an adaptation user of this run"):
        finished.deployment("Zero-Shot").generate("nobody", ["x"])
    with pytest.raises(ConfigError, match="no deployment 'Nope'"):
        finished.deployment("Nope")


def test_the_command_prints_the_stored_generation(finished, capsys):
    from persalign import cli

    row = finished.rows().query("deployment == 'Global RM'").iloc[0]
    assert cli.main(["generate", str(finished.path), "--deployment", "Global RM", "--user", row["user"],
                     row["prompt"]]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == row["generation"]
    line = cli_error(capsys, ["generate", str(finished.path), "--deployment", "Zero-Shot", "--user", "nobody", "x"])
    assert line.startswith("persalign: error: user 'nobody': not an adaptation user of this run")


def test_the_rl_leg_gives_back_its_stored_generation(tmp_path):
    """The RL deployment (`METHOD (RL)`): the policy with the tuned LoRA adapter the run stored."""
    rl = [a for a in TINY if not a.startswith(("seeds", "split.max_query"))] + [
        "seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]", "reward.epochs=2",
        "args.enabled=false", "rl.enabled=true", "rl.steps=1", "rl.generations=2", "split.max_query_per_user=2"]
    finished = persalign.run(load_config("demo-baselines", rl), tmp_path / "run")
    row = finished.rows().query("deployment == 'Global RM (RL)'").iloc[0]
    deployment = finished.deployment("Global RM (RL)")
    assert deployment.generate(row["user"], [row["prompt"]]) == [row["generation"]]
    assert deployment.planned.decoder == "rl"

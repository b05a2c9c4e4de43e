"""`generate` with a finished run's deployments (issue #54): for a query of the run it gives back the stored
generation exactly, for every deployment kind; a new prompt is generated for the same user; what cannot be
generated is refused in one line.

    pytest tests/test_generate.py
"""

from __future__ import annotations

import json

import pytest
import torch

import persalign
from persalign.api.new_user import NewUser, mined_pairs, read_new_users
from persalign.core.config import load_config
from persalign.core.errors import ConfigError
from persalign.core.records import Comparison
from tests.bad_input_helpers import cli_error
from tests.test_runner import TINY

pytestmark = pytest.mark.xdist_group("generate")  # one worker: the module's run is made once, not once per worker

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


def twin_pairs(deployment, user: str, name: str = "Twin") -> list[Comparison]:
    """A run user's own support pairs, stated by a new user."""
    run_ctx = deployment._parts()[0]
    by_id = {c.id: c for c in run_ctx.dataset.comparisons}
    return [Comparison(f"{name}-{i}", name, by_id[i].prompt, by_id[i].chosen, by_id[i].rejected)
            for i in run_ctx.split.support[user]]


@pytest.mark.parametrize("label", ["LoRE", "ICL-RAG (2-shot)", "P-DPO"])
def test_a_new_user_stating_a_run_users_pairs_is_adapted_to_that_user(finished, label):
    """Adapted the way the run adapted its users: the same pairs give the same person (ARGS with a personalized
    RM, retrieved demonstrations, P-DPO's soft prompt), so the run user's stored outputs come back."""
    deployment = finished.deployment(label)
    rows = finished.rows().query("deployment == @label")
    user = rows["user"].iloc[0]
    seconds = deployment.add_users({"Twin": NewUser("Twin", [], twin_pairs(deployment, user))})
    mine = rows.query("user == @user")
    assert deployment.generate("Twin", list(mine["prompt"])) == list(mine["generation"])
    assert seconds > 0 and "Twin" in deployment.users()
    trained = deployment._parts()[1].trained
    if label == "LoRE":  # the user's weights themselves, not only the outputs (and they are the user's own)
        (table,) = trained.method.user_tables().values()
        rows_of = trained.method.users
        other = next(u for u in rows_of if u not in (user, "Twin"))
        assert torch.equal(table[rows_of["Twin"]], table[rows_of[user]])
        assert not torch.equal(table[rows_of[other]], table[rows_of[user]])


def test_a_new_users_texts_are_paired_with_negatives_mined_from_train_users(finished, tmp_path, capsys):
    deployment = finished.deployment("LoRE")
    run_ctx = deployment._parts()[0]
    query = finished.rows().query("deployment == 'LoRE'")
    texts = [{"user": "Nova", "prompt": p, "output": f"Nova's take {i}"} for i, p in enumerate(query["prompt"][:4])]
    (tmp_path / "nova.jsonl").write_text("\n".join(json.dumps(t) for t in texts))
    nova = read_new_users(tmp_path / "nova.jsonl")["Nova"]
    pairs = mined_pairs(run_ctx, nova, seed=0)
    train_texts = {c.chosen for c in run_ctx.dataset.comparisons if c.user in run_ctx.split.train_users}
    assert [p.chosen for p in pairs] == [t["output"] for t in texts]
    assert all(p.rejected in train_texts for p in pairs)
    assert mined_pairs(run_ctx, nova, seed=0) == pairs  # seeded: the same negatives every time
    from persalign import cli

    assert cli.main(["generate", str(finished.path), "--deployment", "LoRE", "--new-users", str(tmp_path /
                     "nova.jsonl"), "--user", "Nova", texts[0]["prompt"]]) == 0
    out, err = capsys.readouterr()
    assert "adapted 1 new user(s) (Nova) in " in err and "4 text(s), each paired with a hard negative" in err
    assert len(out.strip().splitlines()) == 1
    assert cli.main(["generate", str(finished.path), "--deployment", "ICL-RAG (2-shot)", "--new-users",
                     str(tmp_path / "nova.jsonl"), "--user", "Nova", texts[0]["prompt"]]) == 0
    assert "4 text(s) and the chosen answers of 0 preference(s) as demonstrations" in capsys.readouterr().err


def test_new_users_are_refused_in_one_line_where_they_cannot_be_adapted(finished, tmp_path, capsys):
    user = finished.rows()["user"].iloc[0]
    with pytest.raises(ConfigError, match="Best-of-N reranks the samples the run drew"):
        finished.deployment("LoRE (Best-of-N)").add_users({"Nova": NewUser("Nova", [], [])})
    with pytest.raises(ConfigError, match=f"new user {user!r}: already a user of this run"):
        finished.deployment("LoRE").add_users({user: NewUser(user, [], [])})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "Nova", "prompt": "a", "output": "b"}\n{"user": "Nova", "prompt": "a", "chosen": "b"}\n')
    line = cli_error(capsys, ["generate", str(finished.path), "--deployment", "LoRE", "--new-users", str(bad),
                              "--user", "Nova", "x"])
    assert line == f"persalign: error: {bad}, record line 2: field 'rejected' is missing"

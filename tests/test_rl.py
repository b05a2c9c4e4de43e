"""The RL leg (issue #41): TRL's GRPO with a LoRA adapter moves the policy toward what the reward prefers,
leaves the shared policy untouched and counts its work; in a run, one adapter per adaptation user for a
personalized RM and one for a global RM, resumable, its per-user work in the adaptation column."""

import json
from dataclasses import replace

import torch

from persalign.core.config import RLConfig, load_config
from persalign.core.prompts import PromptFormatter
from persalign.decoders.rl_training import CountedReward, tune, tuned_model
from persalign.engine.cost import shape_of
from persalign.report.markdown import build_report
from persalign.runner.run import run
from persalign.runner.store import Cell
from tests.test_runner import TINY

LOW = 130  # the reward: the share of a response's tokens with an id below this


def low_share(lm, prompt_ids) -> float:
    with torch.no_grad():
        logits = lm.model(torch.tensor([prompt_ids])).logits[0, -1]
    return torch.softmax(logits, -1)[:LOW].sum().item()


def test_a_reward_for_low_token_ids_moves_the_tuned_policy_toward_them(tiny_lm, tmp_path):
    model = type(tiny_lm.model)(tiny_lm.model.config)
    model.load_state_dict(tiny_lm.model.state_dict())
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # a random tiny model's logits are nearly flat; these are not
    lm = replace(tiny_lm, model=model)
    before_weights = {k: v.clone() for k, v in model.state_dict().items()}
    formatter = PromptFormatter(lm.tokenizer, "chat")
    prompts = {lm.tokenizer.decode(ids): ids for ids in (formatter.prompt_ids(f"Write about topic {i}.")
                                                         for i in range(4))}
    score = lambda users, ps, rs: [sum(t < LOW for t in r) / max(1, len(r)) for r in rs]  # noqa: E731
    reward = CountedReward(score, formatter, prompts, (shape_of(model), None), 6)
    config = RLConfig(steps=8, generations=4, learning_rate=5e-2, lora_rank=4, lora_alpha=8)
    tuning = tune(lm, reward, ["u"] * len(prompts), config, seed=0, out_dir=tmp_path)
    first = next(iter(prompts.values()))
    tuned = replace(lm, model=tuned_model(lm, tuning.state, config))
    assert low_share(tuned, first) > low_share(lm, first) + 0.1
    assert tuning.rewards[-1] > tuning.rewards[0]
    assert tuning.completions == 8 * 4 and tuning.flops > 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before_weights.items())  # the policy untouched


def test_rl_cells_tune_one_adapter_per_user_for_a_personalized_rm_and_resume(tmp_path, cache_dir):
    config = load_config("demo-baselines", TINY + [
        "seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}, {name: lore}]", "reward.epochs=1",
        "args.enabled=false", "rl.enabled=true", "rl.steps=1", "rl.generations=2", "split.max_query_per_user=2"])
    store = run(config, tmp_path / "run", log=lambda *_: None)
    cells = {m["decoder"]: m for m in store.all_metrics()}
    assert set(cells) == {"Zero-Shot", "Global RM (RL)", "LoRE (RL)"}
    users = cells["LoRE (RL)"]["users"]
    lore, global_rm = cells["LoRE (RL)"]["settings"], cells["Global RM (RL)"]["settings"]
    assert lore["rl"]["adapters"] == users and global_rm["rl"]["adapters"] == 1
    assert lore["training"]["adapt_work"]["rl_flops_per_user"] > 0  # per-user RL: a counted cost per new user
    assert global_rm["training"]["adapt_work"]["rl_flops_per_user"] == 0  # one adapter serves every user
    for label in ("Global RM (RL)", "LoRE (RL)"):
        assert {"policy_accuracy", "rm_accuracy", "win_rate", "rouge1"} <= set(cells[label])
    folder = store.cell_dir(Cell(config.policies[0], "LoRE (RL)", 0))
    (folder / "metrics.json").unlink()  # as if interrupted after tuning: the adapters are read back
    stamps = {p.name: p.stat().st_mtime_ns for p in (folder / "rl").glob("*.safetensors")}
    again = {m["decoder"]: m for m in run(config, tmp_path / "run", log=lambda *_: None).all_metrics()}
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "rl").glob("*.safetensors")} == stamps
    assert again["LoRE (RL)"]["rouge1"] == cells["LoRE (RL)"]["rouge1"]
    assert "LoRE (RL)" in build_report(store.root)
    assert json.loads((folder / "metrics.json").read_text())["settings"]["rl"]["steps_cap"] == 1


def test_a_stored_adapter_that_is_no_adapter_of_the_policy_is_set_aside_and_tuned_again(tmp_path, cache_dir, capsys):
    """Issue #56: an adapter file replaced by a valid safetensors file of one unrelated tensor was loaded without
    a word on resume (41e66f0): the untuned policy reported as 'Global RM (RL)', 43 values different, exit 0."""
    from safetensors.torch import save_file

    config = load_config("demo-baselines", TINY + [
        "seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]", "reward.epochs=1",
        "args.enabled=false", "rl.enabled=true", "rl.steps=1", "rl.generations=2", "split.max_query_per_user=2"])
    lines: list[str] = []
    store = run(config, tmp_path / "run", log=lines.append)
    before = {m["decoder"]: m for m in store.all_metrics()}["Global RM (RL)"]
    folder = store.cell_dir(Cell(config.policies[0], "Global RM (RL)", 0))
    rows_before = (folder / "rows.jsonl").read_text()
    (adapter,) = list((folder / "rl").glob("*.safetensors"))
    for name in ("metrics.json", "rows.jsonl"):
        (folder / name).unlink()  # as if interrupted after tuning: the adapter is read back
    save_file({"unrelated": torch.zeros(3)}, str(adapter))
    capsys.readouterr()
    again = {m["decoder"]: m for m in run(config, tmp_path / "run", log=lines.append).all_metrics()}
    warnings = capsys.readouterr().err.splitlines()
    assert any(f"{adapter.name}: damaged (28 of its 28 LoRA tensors missing" in line and "tuned again" in line
               for line in warnings), warnings
    assert adapter.with_name(adapter.name + ".damaged").exists()
    assert (folder / "rows.jsonl").read_text() == rows_before
    assert again["Global RM (RL)"]["rouge1"] == before["rouge1"]
    log = adapter.with_suffix(".json")  # a damaged adapter log: was a JSONDecodeError (41e66f0)
    for name in ("metrics.json", "rows.jsonl"):
        (folder / name).unlink()
    log.write_text('{"user": "every-user", "prompts"')
    run(config, tmp_path / "run", log=lines.append)
    warnings = capsys.readouterr().err.splitlines()
    assert any(f"{adapter.name}: damaged (JSONDecodeError" in line for line in warnings), warnings
    assert (folder / "rows.jsonl").read_text() == rows_before

"""The judge in runs (issue #41): Personalized RewardBench's rubric reaches the judge and nothing else, every
generating cell is judged against zero-shot and (where the data has one) against the user's own text, Best-of-N
gets a judged curve and both correlations (judged and circular), the judge's agreement with ROUGE-1 and its
counted work are stored."""

import json
import re

import numpy as np
import pytest

from persalign.core.config import load_config
from persalign.report.markdown import build_report
from persalign.runner import judging
from persalign.runner.run import run
from persalign.runner.store import Cell
from tests.test_runner import TINY
from tests.test_shipped_configs import CONFIGS, rewardbench

RESPONSES = re.compile(r"Response A: (.*)\n\nResponse B: (.*)\n\nWhich", re.S)


class LongerWins:
    """A scripted judge: the longer response fits better (equal lengths: a tie); it records what it was shown."""

    def __init__(self):
        self.prompts = []

    def __call__(self, prompts):
        self.prompts += prompts
        answers = []
        for prompt in prompts:
            a, b = RESPONSES.search(prompt).groups()
            answers.append("A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie")
        return answers


@pytest.fixture
def scripted_judge(monkeypatch):
    judge = LongerWins()
    monkeypatch.setattr(judging, "load_judges", lambda config, *_: judging.Judges(config.judge, [judge]))
    monkeypatch.setattr("persalign.runner.cells.load_judges", lambda config, *_: judging.Judges(config.judge, [judge]))
    return judge


def cell_rows(store, metrics):
    return store.read_rows(Cell(metrics["policy"], metrics["decoder"], metrics["seed"]))


def test_rewardbench_is_judged_with_the_rubric_and_best_of_n_gets_both_correlations(tmp_path, cache_dir,
                                                                                      scripted_judge):
    config = load_config(str(CONFIGS / "personalized_rewardbench.yaml"), TINY + rewardbench(tmp_path / "d") + [
        "seeds=[0]", "judge.models=[scripted]", "decoders=[{name: zero_shot}]", "best_of_n.ns=[1, 2]",
        "reward.epochs=1", "args.lambdas=[0]", "rl.steps=1", "rl.generations=2"])  # the shipped legs, made small
    store = run(config, tmp_path / "run", log=lambda *_: None)
    assert any("SECRET" in p for p in scripted_judge.prompts)  # the rubric reaches the judge ...
    cells = {m["decoder"]: m for m in store.all_metrics()}
    zero = {r["id"]: r["generation"] for r in cell_rows(store, cells["Zero-Shot"])}
    for label in ("Global RM", "Global RM (Best-of-N)", "LoRE (Best-of-N)", "PAL (RL)"):
        rows = cell_rows(store, cells[label])
        assert all("SECRET" not in json.dumps({k: v for k, v in r.items() if not k.startswith("judge")})
                   for r in rows)  # ... and nothing a reward model or the policy reads
        for row in rows:  # the scripted judge's verdict, asked in both orders, reaches the row
            gap = len(row["generation"]) - len(zero[row["id"]])
            assert row["judge_score"] == (1.0 if gap > 0 else 0.0 if gap < 0 else 0.5)
            assert row["judge_position_bias"] == 0 and row["judge_flops"] == 0.0  # a scripted judge: no model work
        expected = np.mean([np.mean([r["judge_score"] for r in rows if r["user"] == u])
                            for u in {r["user"] for r in rows}])
        assert cells[label]["judge_win_rate"] == pytest.approx(100 * expected)
    curves = cells["LoRE (Best-of-N)"]["settings"]["curves"]
    assert set(curves["judge_win_rate"]) == {"1", "2"} and curves["rm_score"]
    report = build_report(store.root)
    for title in ("RM Acc vs judged win rate @N_max", "RM Acc vs its own RM score @N_max (circular)",
                  "RM Acc vs judged win rate (RL)"):  # three methods: each correlation a number or its reason
        assert re.search(rf"\| Kendall τ: {re.escape(title)} \| (observed [+-]\d\.\d\d|n/a \()", report), title
    assert "## Judged by an LLM that knows the user" in report and "## RL leg" in report


def test_writing_data_is_judged_against_the_users_text_and_checked_against_rouge(tmp_path, cache_dir,
                                                                                  scripted_judge):
    config = load_config("demo-baselines", TINY + ["seeds=[0]", "judge.models=[scripted]",
                                                   "decoders=[{name: zero_shot}, {name: icl, shots: 2}]"])
    store = run(config, tmp_path / "run", log=lambda *_: None)
    cells = {m["decoder_name"]: m for m in store.all_metrics()}
    assert any("Texts this user wrote before:" in p for p in scripted_judge.prompts)
    zero = {r["id"]: r for r in cell_rows(store, cells["zero_shot"])}
    assert all(r["judge_user_score"] is not None and "judge_score" not in r for r in zero.values())
    rows = cell_rows(store, cells["icl"])
    for row in rows:
        gap = row["rouge1"] - zero[row["id"]]["rouge1"]
        if gap and row["judge"] in ("win", "loss"):
            assert row["judge_rouge_agree"] == float((gap > 0) == (row["judge"] == "win"))
        else:
            assert "judge_rouge_agree" not in row
    assert "judge_user_win_rate" in cells["icl"] and "judge_s" in cells["icl"]["stage_seconds"]

"""Every shipped config of pair-only data runs every default decoder (issue #28, defect 6).

configs/prism.yaml, tldr.yaml and personalized_rewardbench.yaml keep the default
decoders (zero-shot, ICL, ICL-RAG). Their loaders fill no user profiles, so ICL
once looked its demonstrations up where there were none (KeyError 'u2c0/1/1');
on pair-only data the demonstrations are the user's support pairs (prompt →
chosen answer). Each config runs here on a small file of its official schema,
generated in code, on the tiny model (split sizes overridden to fit the file).
"""

import json
from pathlib import Path

import pytest

from persalign.core.config import load_config
from persalign.runner.run import run
from persalign.runner.store import Cell, RunStore
from tests.schema_records import _prism_turn, prism_survey

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = ["policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]", "seeds=[0]",
        "generation.max_new_tokens=3", "generation.batch_size=8", "split.max_query_per_user=2", "methods=[]"]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def prism(folder: Path) -> list[str]:
    survey = [dict(prism_survey()[0], user_id=f"user{u}") for u in range(6)]
    conversations = [{"conversation_id": f"c{u}-{c}", "user_id": f"user{u}", "conversation_type": "unguided",
                      "conversation_turns": 2, "open_feedback": "",
                      "conversation_history": [m for t in range(2) for m in _prism_turn(
                          t, f"question {t} of talk {c} by {u}", [(f"answer {r} to {t}/{c}/{u}", 90 - 30 * r)
                                                                  for r in range(3)])]}
                     for u in range(6) for c in range(3)]
    write_jsonl(folder / "conversations.jsonl", conversations)
    write_jsonl(folder / "survey.jsonl", survey)
    return [f"data.path={folder}", "split.adapt_fraction=0.35"]


def tldr(folder: Path) -> list[str]:
    records = [{"info": {"id": f"t3_{w}_{i}", "post": f"Post {i} of worker {w} about a cat.", "title": f"Post {i}",
                         "subreddit": "cats"},
                "summaries": [{"text": f"Short summary {w}/{i}", "policy": "sup", "note": None},
                              {"text": f"A longer summary {w}/{i}", "policy": "ppo", "note": None}],
                "choice": (w + i) % 2, "worker": f"w{w}", "batch": "b", "split": "train", "extra": {}}
               for w in range(13) for i in range(4 + (w < 10))]
    return [f"data.path={write_jsonl(folder / 'comparisons.jsonl', records)}", "split.adapt_pairs_per_user=4"]


def rewardbench(folder: Path) -> list[str]:
    records = [{"id": f"prb{u}-{i}", "question": f"Question {i} for person {u}?",
                "profile": [{"id": f"p{u}", "category": "food", "text": f"Person {u} likes dish {u}"}],
                "rubric_aspects": ["SECRET"], "narrative": "SECRET", "category": "lifestyle",
                "chosen": f"Chosen answer {u}/{i}", "rejected": f"Rejected answer {u}/{i}"}
               for u in range(6) for i in range(4)]
    return [f"data.path={write_jsonl(folder / 'prb.jsonl', records)}", "split.adapt_fraction=0.35"]


def rewardbench_baselines(folder: Path) -> list[str]:
    """The shipped config's reward-free deployments (its methods, Best-of-N, RL and judge: tests/test_judge_runs.py)."""
    return rewardbench(folder) + ["methods=[]", "judge.models=[]", "rl.enabled=false"]


@pytest.mark.parametrize("config,make", [("prism.yaml", prism), ("tldr.yaml", tldr),
                                         ("personalized_rewardbench.yaml", rewardbench_baselines)])
def test_a_shipped_pair_only_config_runs_every_default_decoder(config, make, tmp_path, cache_dir):
    overrides = make(tmp_path / "data")
    store = run(load_config(str(CONFIGS / config), TINY + overrides), tmp_path / "run", log=lambda *_: None)
    cells = {m["decoder_name"]: m for m in store.all_metrics()}
    assert set(cells) == {"zero_shot", "icl", "icl_rag"}
    for name in ("icl", "icl_rag"):
        assert cells[name]["demos_used_min"] >= 1  # the support pairs' chosen answers are the demonstrations
        metrics = cells[name]
        rows = RunStore(store.root).read_rows(Cell(metrics["policy"], metrics["decoder"], metrics["seed"]))
        assert rows and all(row["demo_ids"] and row["policy_correct"] in (0.0, 1.0) for row in rows)

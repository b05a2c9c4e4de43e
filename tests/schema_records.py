"""Tiny records in each data set's official schema (../shared/data/SCHEMAS.md), built in code.

The loader tests read them as files; the `fixtures` fixture (conftest.py)
writes them to a temporary folder, so the repository tracks no data files.
Each builder returns what one file holds: a list of records for `.jsonl`,
the whole document for `.json`. The odd records (no author, an empty
profile, a one-response PRISM turn, an unknown PRISM user, unicode) are
the cases the loader tests check.
"""

from __future__ import annotations

import json
from pathlib import Path


def _lamp(task: str, instruction: str, queries: list[tuple[str, str, str, list[dict]]]) -> dict:
    """`queries`: (id, input text, gold output, profile) → {questions file name: ..., outputs file name: ...}."""
    number = task.split("_")[1]
    questions = [{"id": id_, "input": f"{instruction}{text}", "profile": profile} for id_, text, _, profile in queries]
    golds = [{"id": id_, "output": gold} for id_, _, gold, _ in queries]
    return {f"lamp{number}_dev_outputs.json": {"task": task, "golds": golds},
            f"lamp{number}_dev_questions.json": questions}


def _lamp_files() -> dict:
    def scholarly(id_, title, abstract):
        return {"id": id_, "title": title, "abstract": abstract}

    headlines = _lamp("LaMP_4", "Generate a headline for the following article: ", [
        ("200", "The mayor opened a park.", "Mayor Opens Park", [
            {"id": "2001", "title": "Park Opens Downtown", "text": "A new park opened downtown.", "date": "2020-01-01"},
            {"id": "2002", "title": "Library Hours Extended", "text": "The library is open longer.", "date": "2020-02-01"}]),
        ("201", "Storm hits coast.", "storm batters coast", [
            {"id": "2011", "title": "storm warning issued", "text": "A storm is coming to the coast."}]),
    ])
    titles = _lamp("LaMP_5", "Generate a title for the following abstract of a paper: ", [
        ("100", "Query abstract of u1 about learning.", "Query Title of u1", [
            scholarly("1000", "Message Passing for Molecules", "We study graph neural networks for molecule property prediction."),
            scholarly("1001", "MolBench: Benchmarking Molecular Graphs", "A new benchmark for molecular graph learning is proposed."),
            scholarly("1002", "On Over-Smoothing in Deep GNNs", "We analyse over-smoothing in deep graph networks.")]),
        ("101", "Query abstract of u2 about learning.", "Query Title of u2", [
            scholarly("1010", "attention folds proteins", "Transformers are applied to protein folding with attention maps."),
            scholarly("1011", "less data, same model", "A recipe for training language models with less data."),
            scholarly("1012", "tokenizing the genome", "We describe a tokenizer for DNA sequences.")]),
        ("102", "Query abstract of u3 about learning.", "Query Title of u3", [
            scholarly("1020", "Grasping in Clutter via Deep RL: A Study", "Reinforcement learning for robot grasping in clutter."),
            scholarly("1021", "Sim-to-Real Locomotion: Lessons Learned", "Sim-to-real transfer of legged locomotion policies."),
            scholarly("1022", "Unicode Rewards: A Café Study ☕", "Émile's café ☕ study: unicode in reward models.")]),
    ])
    tweets = _lamp("LaMP_7", "Paraphrase the following tweet without any explanation before or after it: ", [
        ("300", "so tired today", "need sleep badly", [
            {"id": "3001", "text": "coffee first, questions later"}, {"id": "3002", "text": "mondays, am i right"}]),
        ("301", "great game tonight", "what a match!!", []),
    ])
    return {**headlines, **titles, **tweets}


def news_records() -> list[dict]:
    """Three authors with a house headline style each, four stories apiece, and one article without an author."""
    styles = {"Ann": ("Ann Writer", "{} Is Here", "Ann"), "Bob": ("Bob Reporter", "why {} matters", "Bob"),
              "Cy": ("Cy Editor", "{}: What We Know", "Cy ")}
    stories = ["Election Night", "Heat Wave", "New Stadium", "Vaccine Rollout"]
    records = [
        {"link": f"https://example.org/{slug}{number}", "headline": style.format(story), "category": "NEWS",
         "short_description": f"Report number {number} on {story.lower()} by {name}.", "authors": author,
         "date": f"2022-{number + 1:02d}-01"}
        for name, (author, style, slug) in styles.items() for number, story in enumerate(stories)
    ]
    records.append({"link": "https://example.org/x", "headline": "No Author Here", "category": "NEWS",
                    "short_description": "Nobody wrote this.", "authors": "", "date": "2022-01-01"})
    return records


def rewardbench_records() -> list[dict]:
    profile = [{"id": "p1", "category": "food", "text": "I love spicy ramen"},
               {"id": "p2", "category": "travel", "text": "Trips to Kyoto"}]
    questions = [("Suggest a dinner.", profile), ("Plan a weekend.", profile), ("Recommend a book.", [])]
    return [{"id": f"prb{i}", "question": question, "profile": list(user_profile),
             "rubric_aspects": ["SECRET RUBRIC"], "narrative": "SECRET NARRATIVE", "category": "lifestyle",
             "chosen": f"Chosen answer {i}", "rejected": f"Rejected answer {i}"}
            for i, (question, user_profile) in enumerate(questions)]


def _prism_turn(turn: int, prompt: str, responses: list[tuple[str, int]]) -> list[dict]:
    """One user message and its rated model responses; the first response is the chosen one."""
    messages = [{"turn": turn, "role": "user", "content": prompt, "within_turn_id": 0}]
    messages += [{"turn": turn, "role": "model", "content": content, "within_turn_id": i, "if_chosen": i == 0,
                  "score": score, "model_name": f"m{i}", "model_provider": "p"}
                 for i, (content, score) in enumerate(responses)]
    return messages


def prism_conversations() -> list[dict]:
    conversations = [
        ("user0", "unguided", [_prism_turn(0, "Hello, ¿qué tal?", [("Fine, thanks!", 90), ("Go away.", 10), ("I am a model.", 40)]),
                               _prism_turn(1, "Tell me a joke.", [("Why did the chicken...", 80), ("No.", 5)])]),
        ("user1", "values guided", [_prism_turn(0, "Only one answer here", [("The only response", 70)])]),
        ("ghost", "unguided", [_prism_turn(0, "hi", [("a", 50), ("b", 50)])]),
        ("user2", "unguided", [_prism_turn(0, "What is 2+2?", [("4", 99), ("5", 1)])]),
    ]
    return [{"conversation_id": f"c{i}", "user_id": user, "conversation_type": kind, "conversation_turns": len(turns),
             "open_feedback": "", "conversation_history": [message for turn in turns for message in turn]}
            for i, (user, kind, turns) in enumerate(conversations)]


def prism_survey() -> list[dict]:
    return [{"user_id": f"user{i}", "num_completed_conversations": 1, "self_description": "...", "system_string": "",
             "order_stated_prefs": {"values": 1}, "age": "25-34", "gender": "x", "education": "y",
             "employment_status": "z", "marital_status": "s", "english_proficiency": "Native"}
            for i in range(3)]


def tldr_comparisons() -> list[dict]:
    """Five comparisons by three workers; `choice` indexes the preferred summary."""
    choices_and_workers = [(0, "w1"), (1, "w1"), (1, "w2"), (0, "w2"), (1, "w3")]
    return [{"info": {"id": f"t3_{i}", "post": f"My post number {i} about my cat 🐱.", "title": f"Post {i}",
                      "subreddit": "cats"},
             "summaries": [{"text": f"Short summary {i}", "policy": "sup", "note": None},
                           {"text": f"A much longer and more detailed summary {i}", "policy": "ppo", "note": None}],
             "choice": choice, "worker": worker, "batch": "batch3", "split": "train", "extra": {"confidence": 7}}
            for i, (choice, worker) in enumerate(choices_and_workers)]


def fixture_files() -> dict:
    """File name (relative) → its content."""
    return {**_lamp_files(), "news_small.jsonl": news_records(),
            "personalized_rewardbench.jsonl": rewardbench_records(),
            "prism/conversations.jsonl": prism_conversations(), "prism/survey.jsonl": prism_survey(),
            "tldr_comparisons.jsonl": tldr_comparisons()}


def write_fixture_files(folder: Path) -> Path:
    for name, content in fixture_files().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".jsonl"):
            text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in content)
        else:
            text = json.dumps(content, ensure_ascii=False, indent=1)
        path.write_text(text, encoding="utf-8")
    return folder

"""A small file in Personalized RewardBench's schema (id, question, profile, rubric_aspects, narrative,
category, chosen, rejected), for trying configs/personalized_rewardbench.yaml where the real data set is
not reachable. Synthetic and deterministic: each user has one rubric aspect (a style) and a profile of
earlier texts in that style; `chosen` follows the aspect and `rejected` violates it, both on topic.

    python examples/personalized_rewardbench_fixture.py /tmp/prb.jsonl --users 12 --questions 8
    persalign run configs/personalized_rewardbench.yaml data.path=/tmp/prb.jsonl
"""

from __future__ import annotations

import argparse
import json
import random

STYLES = [
    ("Answers in one short sentence.", lambda t: f"{t.capitalize()}: keep it simple.",
     lambda t: f"There are many considerations about {t}; first, think about the context, then the options, "
               "then the trade-offs, and finally decide what suits you over the coming weeks."),
    ("Answers as a numbered list.", lambda t: f"1. Pick a {t} idea. 2. Try it. 3. Keep what works.",
     lambda t: f"I would simply pick a {t} idea, try it and keep what works."),
    ("Answers with a question back to the user.", lambda t: f"What matters most to you about {t}?",
     lambda t: f"Here is what to do about {t}: choose the first option."),
    ("Answers enthusiastically, with an exclamation.", lambda t: f"Great choice — {t} will be fun!",
     lambda t: f"{t.capitalize()} is an acceptable choice."),
]
TOPICS = ["dinner", "a weekend trip", "a book", "a workout", "a gift", "a hobby", "a podcast", "a movie",
          "a garden plan", "a study routine", "a morning habit", "a board game"]


def records(users: int, questions: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for u in range(users):
        aspect, follows, violates = STYLES[u % len(STYLES)]
        profile = [{"id": f"u{u}-p{j}", "category": "history", "text": follows(rng.choice(TOPICS))} for j in range(3)]
        for q in range(questions):
            topic = TOPICS[(u + q) % len(TOPICS)]
            question = f"I'm user {u} and I have {q + 1} free hours. Can you suggest {topic} for me?"
            out.append({"id": f"u{u}-q{q}", "question": question, "profile": profile,
                        "rubric_aspects": [aspect], "narrative": f"User {u} values this: {aspect}",
                        "category": "lifestyle", "chosen": follows(topic), "rejected": violates(topic)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the JSONL file to write")
    parser.add_argument("--users", type=int, default=12, help="users (each with its own profile and rubric)")
    parser.add_argument("--questions", type=int, default=8, help="questions per user")
    args = parser.parse_args()
    with open(args.path, "w", encoding="utf-8") as handle:
        for record in records(args.users, args.questions):
            handle.write(json.dumps(record) + "\n")
    print(f"wrote {args.users * args.questions} examples of {args.users} users to {args.path}")


if __name__ == "__main__":
    main()

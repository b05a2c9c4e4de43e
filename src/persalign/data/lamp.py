"""LaMP (Salemi et al. 2024) tasks 4, 5 and 7 from the official files.

`data.path` is a `{split}_questions.json` file; its `{split}_outputs.json` sits
beside it. Each question is one user: the profile is their history and the gold
output is their own text. Items per user = profile items + the question.

- LaMP-5: profile {id, title, abstract} -> input abstract, output title
- LaMP-4: profile {id, title, text}     -> input text, output title
- LaMP-7: profile {id, text}            -> style-only history (no input); the
  question (tweet to paraphrase -> the user's tweet) is the one pair per user.

    persalign data summary configs/lamp5.yaml
"""

from __future__ import annotations

from pathlib import Path

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.records import UserItem
from persalign.core.registry import register_dataset
from persalign.data.jsonio import UniqueIds, optional_text, read_json, record_id, require_text
from persalign.data.writing import UserWriting

# task -> (prefix of the official question input, task template, profile input key)
LAMP_TASKS = {
    "LaMP_4": ("Generate a headline for the following article: ", "headline", "text"),
    "LaMP_5": ("Generate a title for the following abstract of a paper: ", "title", "abstract"),
    "LaMP_7": ("Paraphrase the following tweet without any explanation before or after it: ", "tweet", None),
}


def _outputs_path(questions: Path) -> Path:
    if "questions" not in questions.name:
        raise DataError(questions, "expected a LaMP '{split}_questions.json' file")
    return questions.with_name(questions.name.replace("questions", "outputs"))


def _profile_item(task: str, user: str, raw, path: Path, where: str) -> UserItem:
    if not isinstance(raw, dict):
        raise DataError(path, "profile item must be an object", where)
    item_id = f"{user}/{record_id(raw, 'id', path, where) or ''}"
    input_key = LAMP_TASKS[task][2]
    date = optional_text(raw, "date", path, where)
    if input_key is None:  # LaMP-7: the tweet itself is the user's writing
        return UserItem(item_id, user, "", require_text(raw, "text", path, where), date)
    return UserItem(item_id, user, require_text(raw, input_key, path, where), require_text(raw, "title", path, where),
                    date)


@register_dataset("lamp")
def load_lamp(config: DataConfig) -> UserWriting:
    """LaMP-4/5/7 user-based split: `{split}_questions.json` + `{split}_outputs.json`."""
    if not config.path:
        raise DataError("<config>", "data.path must name a LaMP {split}_questions.json file")
    questions_path = Path(config.path).expanduser()
    outputs_path = _outputs_path(questions_path)
    questions, outputs = read_json(questions_path), read_json(outputs_path)
    if not isinstance(outputs, dict) or "task" not in outputs or "golds" not in outputs:
        raise DataError(outputs_path, "expected an object with 'task' and 'golds'")
    task = outputs["task"]
    if task not in LAMP_TASKS:
        raise DataError(outputs_path, f"unknown task {task!r} (supported: {sorted(LAMP_TASKS)})")
    golds, gold_ids = {}, UniqueIds(outputs_path, "gold id")
    for i, gold in enumerate(outputs["golds"]):
        where = f"golds[{i}]"
        if not isinstance(gold, dict) or record_id(gold, "id", outputs_path, where) is None:
            raise DataError(outputs_path, "gold entry needs an 'id'", where)
        gold_ids.add(str(gold["id"]), where)
        golds[str(gold["id"])] = require_text(gold, "output", outputs_path, where)
    if not isinstance(questions, list):
        raise DataError(questions_path, "expected a JSON list of questions")
    prefix, template, _ = LAMP_TASKS[task]
    items, question_ids = [], UniqueIds(questions_path, "question id")  # a repeated id would merge two users
    for i, question in enumerate(questions):
        where = f"question {i}"
        if not isinstance(question, dict) or record_id(question, "id", questions_path, where) is None:
            raise DataError(questions_path, "question needs an 'id'", where)
        user = str(question["id"])
        question_ids.add(user, where)
        where = f"question id {user}"
        text = require_text(question, "input", questions_path, where)
        if user not in golds:
            raise DataError(outputs_path, f"no gold output for question id {user}")
        profile = question.get("profile")
        if not isinstance(profile, list):
            raise DataError(questions_path, "field 'profile' must be a list", where)
        for j, raw in enumerate(profile):
            items.append(_profile_item(task, user, raw, questions_path, f"{where}, profile[{j}]"))
        query_input = text[len(prefix):] if text.startswith(prefix) else text
        items.append(UserItem(f"{user}/question", user, query_input.strip(), golds[user]))
    return UserWriting(task, template, str(questions_path), items, {"questions": len(questions)})


load_lamp.companion_files = lambda questions: [_outputs_path(questions)]  # hashed with it (provenance)

"""Prompt templates per task, rendered with the model's chat template where it has one.

Tasks: `headline` (LaMP-4, news_category, demo), `title` (LaMP-5), `tweet`
(LaMP-7), `summary`, `chat`, or an inline template for any per-user writing
(`data.task: {instruction: ..., input_label: ..., output_label: ...}`). Zero-shot is one user turn with the instruction and the input. ICL
prepends the user's own demonstrations as earlier turns of the same shape
(instruction + input -> the user's output), so the only difference between
zero-shot and ICL prompts is the demonstrations. Style-only history (items
without an input, e.g. LaMP-7 tweets) is listed in the first turn. Without a
chat template the classic few-shot text format is used instead.

If a prompt would exceed `max_prompt_tokens`, demonstrations are dropped from
the end (the least relevant for ICL-RAG), never the query.
"""

from __future__ import annotations

from dataclasses import dataclass

from persalign.errors import ConfigError
from persalign.records import UserItem


@dataclass(frozen=True)
class TaskTemplate:
    instruction: str
    input_label: str
    output_label: str

    def turn(self, text: str) -> str:
        if not self.instruction:  # conversational data: the user's own message
            return text
        return f"{self.instruction} Reply with the {self.output_label.lower()} only.\n{self.input_label}: {text}"


TASKS = {
    "headline": TaskTemplate("Generate a headline for the following article.", "Article", "Headline"),
    "title": TaskTemplate("Generate a title for the following abstract of a paper.", "Abstract", "Title"),
    "tweet": TaskTemplate(
        "Paraphrase the following tweet without any explanation before or after it.", "Tweet", "Paraphrase"
    ),
    "summary": TaskTemplate("Summarize the following Reddit post.", "Post", "TL;DR"),
    "chat": TaskTemplate("", "User", "Assistant"),  # PRISM, Personalized RewardBench
}


def task_template(task) -> TaskTemplate:
    """A named task, or an inline one (`TaskSpec` or any object with the three fields) for your own writing."""
    if not isinstance(task, str):
        return TaskTemplate(task.instruction.strip(), task.input_label.strip(), task.output_label.strip())
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r} (known: {sorted(TASKS)})")
    return TASKS[task]


def chat_messages(template: TaskTemplate, query_input: str, demos: list[UserItem],
                  history: tuple = ()) -> list[dict[str, str]]:
    """Demonstrations as earlier turns, then the conversation so far, then the query turn."""
    style_only = [d.output for d in demos if not d.input]
    messages = []
    for demo in (d for d in demos if d.input):
        messages += [{"role": "user", "content": template.turn(demo.input)},
                     {"role": "assistant", "content": demo.output}]
    messages += [{"role": role, "content": text} for role, text in history]
    messages.append({"role": "user", "content": template.turn(query_input)})
    if style_only:
        history = "\n".join(f"- {text}" for text in style_only)
        messages[0]["content"] = f"Earlier writing of this user:\n{history}\n\n" + messages[0]["content"]
    return messages


def plain_prompt(template: TaskTemplate, query_input: str, demos: list[UserItem], history: tuple = ()) -> str:
    """Few-shot text for models without a chat template."""
    blocks = [template.instruction] if template.instruction else []
    for demo in demos:
        if demo.input:
            blocks.append(f"{template.input_label}: {demo.input}\n{template.output_label}: {demo.output}")
        else:
            blocks.append(f"{template.output_label}: {demo.output}")
    blocks += [f"{'User' if role == 'user' else 'Assistant'}: {text}" for role, text in history]
    blocks.append(f"{template.input_label}: {query_input}\n{template.output_label}:")
    return "\n\n".join(blocks)


class PromptFormatter:
    """Turns (query, demos) into token ids for one tokenizer and task."""

    def __init__(self, tokenizer, task, max_prompt_tokens: int = 1536):
        self.tokenizer = tokenizer
        self.template = task_template(task)
        self.max_prompt_tokens = max_prompt_tokens
        self.chat = bool(getattr(tokenizer, "chat_template", None))

    def prompt_ids(self, query_input: str, demos: list[UserItem] = (), history: tuple = ()) -> list[int]:
        return self.fit(query_input, demos, history)[0]

    def fit(self, query_input: str, demos: list[UserItem] = (), history: tuple = ()) -> tuple[list[int], int]:
        """(token ids, how many of `demos` are in them): demonstrations are dropped from the end until the
        prompt fits `max_prompt_tokens`, so callers record the ones really shown, not the ones drawn."""
        demos = list(demos)
        while True:
            ids = self._encode(query_input, demos, history)
            if len(ids) <= self.max_prompt_tokens or not demos:
                return ids, len(demos)
            demos.pop()

    def response_ids(self, text: str) -> list[int]:
        # Without a chat template the response follows "Label:", so it starts with a space.
        return self.tokenizer.encode(text if self.chat else " " + text, add_special_tokens=False)

    def _encode(self, query_input: str, demos: list[UserItem], history: tuple = ()) -> list[int]:
        if self.chat:
            ids = self.tokenizer.apply_chat_template(
                chat_messages(self.template, query_input, demos, history), add_generation_prompt=True, tokenize=True
            )
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return self.tokenizer.encode(plain_prompt(self.template, query_input, demos, history))

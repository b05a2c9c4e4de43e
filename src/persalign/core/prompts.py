"""Prompt templates per task, rendered with the model's chat template where it has one.

Tasks: `headline` (LaMP-4, news_category, demo), `title` (LaMP-5), `tweet`
(LaMP-7), `summary`, `chat`, or an inline template for any per-user writing
(`data.task: {instruction: ..., input_label: ..., output_label: ...}`). Zero-shot is one user turn with
the instruction and the input. ICL prepends the user's own demonstrations as earlier turns of the same shape
(instruction + input -> the user's output), so the only difference between
zero-shot and ICL prompts is the demonstrations. Style-only history (items
without an input, e.g. LaMP-7 tweets) is listed in the first turn. Without a
chat template the classic few-shot text format is used instead.

If a prompt would exceed `max_prompt_tokens`, demonstrations are dropped from
the end (the least relevant for ICL-RAG). If the query alone is still too long,
its earliest conversation turns are dropped, then its input is cut to its first
tokens (the instruction and labels stay whole); `fit` says whether it cut, and
the report counts those prompts. The budget is also held under the model's
context less the generation length (`prompt_budget`), and texts are cut to
MAX_CHARS_PER_TOKEN characters per budget token before tokenising, so memory is
bounded by the token budget whatever a record's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from persalign.core.errors import ConfigError, did_you_mean
from persalign.core.records import UserItem

MAX_CHARS_PER_TOKEN = 32  # no tokenizer of the field averages more characters per token than this


def context_length(model_config) -> int | None:
    return getattr(model_config, "max_position_embeddings", None) or getattr(model_config, "n_positions", None)


def prompt_budget(max_prompt_tokens: int, max_new_tokens: int, context: int | None) -> int:
    """Prompt tokens allowed: the configured budget, within the model's context less the generation."""
    return max_prompt_tokens if not context else max(1, min(max_prompt_tokens, context - max_new_tokens))


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
        raise ConfigError(f"unknown task {task!r}{did_you_mean(task, TASKS)} (known: {sorted(TASKS)})")
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

    def fit(self, query_input: str, demos: list[UserItem] = (), history: tuple = ()) -> tuple[list[int], int, bool]:
        """(token ids, how many of `demos` are in them, whether the query itself was cut): demonstrations
        are dropped from the end until the prompt fits `max_prompt_tokens`, so callers record the ones
        really shown, not the ones drawn; then the query is cut (see the module docstring)."""
        demos, history = list(demos), tuple(history)
        limit = self.max_prompt_tokens * MAX_CHARS_PER_TOKEN
        cut = len(query_input) > limit or any(len(text) > limit for _, text in history)
        query_input, history = query_input[:limit], tuple((role, text[:limit]) for role, text in history)
        while True:
            ids = self._encode(query_input, demos, history)
            overflow = len(ids) - self.max_prompt_tokens
            if overflow <= 0:
                return ids, len(demos), cut
            if demos:
                demos.pop()
            elif history:
                history, cut = history[2:], True  # the earliest exchange (user turn + reply)
            elif query_input:
                query_input, cut = self._shorten(query_input, overflow), True
            else:  # the template alone is longer than the budget: nothing more to cut
                return ids, 0, cut

    def _shorten(self, text: str, overflow: int) -> str:
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        shorter = self.tokenizer.decode(tokens[: max(0, len(tokens) - overflow)]).strip()
        return shorter if len(shorter) < len(text) else text[: len(text) // 2]  # always progress

    def response_ids(self, text: str) -> list[int]:
        """A response's tokens, at most the prompt budget (a huge record must not allocate beyond it)."""
        text = text[: self.max_prompt_tokens * MAX_CHARS_PER_TOKEN]
        # Without a chat template the response follows "Label:", so it starts with a space.
        ids = self.tokenizer.encode(text if self.chat else " " + text, add_special_tokens=False)
        return ids[: self.max_prompt_tokens]

    def _encode(self, query_input: str, demos: list[UserItem], history: tuple = ()) -> list[int]:
        if self.chat:
            ids = self.tokenizer.apply_chat_template(
                chat_messages(self.template, query_input, demos, history), add_generation_prompt=True, tokenize=True
            )
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return self.tokenizer.encode(plain_prompt(self.template, query_input, demos, history))

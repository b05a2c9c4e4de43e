"""Range checks of every config value, run when a config is read, before any work.

Types are checked by `config.from_dict`; this module checks what a type
cannot say (a batch size of 0, an empty λ grid, an unknown rule name). The
rules are data: one line per key, with what is allowed, so a message names
the key, the value and the rule in one line:

    config.generation.batch_size: 0 is not allowed (must be an integer >= 1)

    persalign run demo generation.batch_size=0
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from persalign.core.errors import ConfigError

SELECTION_RULES = ("auto", "policy_accuracy", "harmonic", "fixed")
REWARD_MODES = ("frozen", "lora")


def _at_least(low) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v is not None and v >= low), f"a number >= {low}"


def _optional_at_least(low) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v is None or v >= low), f"empty (null) or a number >= {low}"


def _fraction() -> tuple[Callable[[Any], bool], str]:
    return (lambda v: 0 < v < 1), "a fraction strictly between 0 and 1"


def _one_of(names) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in names), f"one of {list(names)}"


def _nonempty_list(item_ok: Callable[[Any], bool], what: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: bool(v) and all(item_ok(x) for x in v)), f"a non-empty list of {what}"


def _distinct_list(item_ok: Callable[[Any], bool], what: str) -> tuple[Callable[[Any], bool], str]:
    """A non-empty list without repeats (a repeated seed or λ would run, and count, the same thing twice)."""
    return (lambda v: bool(v) and all(item_ok(x) for x in v) and len(set(v)) == len(v)), \
        f"a non-empty list of distinct {what}"


def _finite_at_least(low) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v is not None and low <= v < math.inf), f"a finite number >= {low}"


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Rules that check the type too, for values no dataclass annotation types (a method's settings mapping).
POSITIVE = ((lambda v: is_number(v) and 0 < v < math.inf), "a finite number > 0")
NON_NEGATIVE = ((lambda v: is_number(v) and 0 <= v < math.inf), "a finite number >= 0")
COUNT = ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "an integer >= 1")
OPTIONAL_COUNT = ((lambda v: v is None or COUNT[0](v)), "empty (null) or an integer >= 1")
OPTIONAL_POSITIVE = ((lambda v: v is None or POSITIVE[0](v)), "empty (null) or a finite number > 0")
FRACTION = ((lambda v: is_number(v) and 0 <= v <= 1), "a number in [0, 1]")
TEXT = ((lambda v: isinstance(v, str) and bool(v.strip())), "non-empty text")


def _seed(value) -> bool:  # numpy and torch take seeds below 2**32; 2**64 ran every cell, then the report crashed
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 32


RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "name": ((lambda v: isinstance(v, str) and bool(v.strip()) and "/" not in v and "\\" not in v
              and v.strip(".") != ""), "a name without path separators (it names the run folder)"),
    "seeds": _distinct_list(_seed, "integers from 0 to 2**32 - 1"),
    "data.seed": (_seed, "an integer from 0 to 2**32 - 1"),
    "split.seed": (_seed, "an integer from 0 to 2**32 - 1"),
    "policies": _nonempty_list(lambda p: bool(p), "model ids"),
    "threads": ((lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024)),
                "an integer from 1 to 1024, or null for 1"),
    "generation.batch_size": _at_least(1),
    "generation.max_new_tokens": _at_least(1),
    "generation.token_budget": _optional_at_least(16),
    "generation.max_prompt_tokens": _at_least(1),
    "split.adapt_fraction": _fraction(),
    "split.support_fraction": _fraction(),
    "split.heldout_fraction": ((lambda v: 0 <= v < 1), "a fraction in [0, 1)"),
    "split.max_query_per_user": _optional_at_least(1),
    "split.train_top_users": _optional_at_least(1),  # a negative number would slice from the end
    "split.adapt_pairs_per_user": _optional_at_least(1),
    "data.min_items_per_user": _at_least(1),
    "data.max_items_per_user": _optional_at_least(1),
    "data.max_users": _optional_at_least(2),
    "data.negatives_top_k": _at_least(1),
    "reward.mode": _one_of(REWARD_MODES),
    "reward.batch_size": _at_least(1),
    "reward.epochs": _at_least(1),
    "reward.patience": _at_least(1),
    "reward.adapt_epochs": _optional_at_least(1),
    "reward.max_steps": _optional_at_least(1),
    "reward.feature_batch_size": _at_least(1),
    "args.top_k": _at_least(1),
    "args.lambdas": _distinct_list(lambda x: 0 <= x < math.inf, "finite numbers >= 0"),
    "args.fixed_lambda": _finite_at_least(0),
    "reward.lora_rank": _at_least(1),
    "reward.lora_alpha": ((lambda v: 0 < v < math.inf), "a finite number > 0"),
    "args.selection": _one_of(SELECTION_RULES),
    "args.validation_size": _at_least(1),
    "best_of_n.ns": _nonempty_list(lambda n: isinstance(n, int) and n >= 1, "integers >= 1"),
    "metrics.bertscore_layer": _optional_at_least(1),
    "best_of_n.temperature": ((lambda v: v > 0), "a number > 0"),
    # the RL leg: a bad value used to tune anyway (steps 0), train by epochs (steps -1) or fail inside TRL / PEFT
    "rl.steps": ((lambda v: COUNT[0](v) and v <= 100_000), "an integer from 1 to 100000"),
    "rl.generations": ((lambda v: COUNT[0](v) and v >= 2), "an integer >= 2 (GRPO compares a group)"),
    "rl.prompts_per_step": COUNT,
    "rl.learning_rate": POSITIVE,
    "rl.lora_rank": COUNT,
    "rl.lora_alpha": POSITIVE,
    "rl.temperature": POSITIVE,
    # the judge: a negative count was used as a slice, 0 new tokens made every answer unparseable
    "judge.context_items": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0), "an integer >= 0"),
    "judge.context_chars": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0), "an integer >= 0"),
    "judge.max_new_tokens": COUNT,
    "judge.timeout_s": POSITIVE,
    "judge.retries": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10),
                      "an integer from 0 to 10"),
}
DEMO_DRAWS = ("per_user", "per_query")
DECODER_RULES = {"shots": _at_least(0), "draw": ((lambda v: v is None or v in DEMO_DRAWS),
                                                  f"empty (null: the decoder's default) or one of {list(DEMO_DRAWS)}")}


def _get(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def check_value(value, rule, key: str, where: str) -> None:
    ok, allowed = rule
    try:
        good = ok(value)
    except TypeError:
        good = False
    if not good:
        raise ConfigError(f"{where}.{key}: {value!r} is not allowed (must be {allowed})")


def check_task(task, where: str) -> None:
    """An inline task template needs all three fields as non-empty text."""
    if task is None or isinstance(task, str):
        return
    for key in ("instruction", "input_label", "output_label"):
        value = getattr(task, key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}.data.task.{key}: {value!r} is not allowed (an inline task needs "
                              "instruction, input_label and output_label, each non-empty text)")


OWN_DATA = ("completions_jsonl", "preferences_jsonl")  # loaders with no task of their own


def check_own_data_task(data, where: str) -> None:
    """Your own data says what its prompts ask for: refused without `data.task` rather than run under a
    guessed instruction (a neutral or borrowed one would measure another task and still print numbers)."""
    if data.dataset in OWN_DATA and data.task is None:
        from persalign.core.prompts import TASKS

        raise ConfigError(
            f"{where}.data.task: your own data ({data.dataset}) needs the task its prompts ask for; set a named "
            f"one ({', '.join(sorted(TASKS))}), e.g. data.task=chat, or your own: 'data.task={{instruction: "
            "Write a title for this product review., input_label: Review, output_label: Title}'")


def validate(config, where: str = "config") -> None:
    """Raise ConfigError on the first value outside its allowed range."""
    check_task(config.data.task, where)
    check_own_data_task(config.data, where)
    for key, rule in RULES.items():
        check_value(_get(config, key), rule, key, where)
    for i, decoder in enumerate(config.decoders):
        for key, rule in DECODER_RULES.items():
            check_value(getattr(decoder, key), rule, f"decoders[{i}].{key}", where)
    check_judge_endpoint(config.judge, where)
    if config.rl.enabled and not config.methods:  # it planned no RL cell and said nothing
        raise ConfigError(f"{where}.rl.enabled: true, but no reward method to tune the policy with (methods is "
                          "empty); add one, e.g. 'methods=[{name: global_rm}]'")


def check_judge_endpoint(judge, where: str) -> None:
    """An endpoint needs the models it serves, and an http(s) URL with a host (`http://[::1` raised inside httpx)."""
    if judge.endpoint is None:
        return
    if not judge.models:
        raise ConfigError(f"{where}.judge.endpoint: {judge.endpoint!r} is set but judge.models names no model it "
                          "serves, so nothing would be judged; set judge.models=[NAME]")
    try:
        parts = urlsplit(str(judge.endpoint))
        good = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        good = False
    if not good:
        raise ConfigError(f"{where}.judge.endpoint: {judge.endpoint!r} is not an http(s) URL with a host "
                          "(e.g. http://127.0.0.1:8000/v1)")

"""`persalign data summary`: users, pairs per user (mean/min/max), the split, examples."""

from __future__ import annotations

import numpy as np

from persalign.core.config import RunConfig
from persalign.core.user_needs import needs_lines
from persalign.data.build import build_dataset
from persalign.data.split import make_split
from persalign.models.embedders import load_embedder


def prompts_cut_line(config: RunConfig, dataset, split, policy: str) -> str:
    """How many query prompts (zero-shot form) this policy's prompt budget cuts, before any run."""
    from persalign.core.prompts import PromptFormatter, prompt_budget
    from persalign.models.checks import model_limits, policy_tokenizer

    _, context = model_limits(policy, config.cache_dir)
    budget = prompt_budget(config.generation.max_prompt_tokens, config.generation.max_new_tokens,
                           context)
    formatter = PromptFormatter(policy_tokenizer(policy, config.cache_dir), dataset.task, budget)
    by_id = {c.id: c for c in dataset.comparisons}
    queries = [by_id[i] for i in split.query_ids()]
    cut = sum(1 for c in queries if formatter.fit(c.prompt, history=c.history)[2])
    return f"prompts cut to fit ({policy}, budget {budget} tokens): {cut} of {len(queries)} query prompts"


def task_lines(task) -> list[str]:
    """The instruction and labels every prompt carries (a named task shows its name too)."""
    from persalign.core.prompts import task_template

    template = task_template(task)
    name = f"{task} — " if isinstance(task, str) else ""
    if not template.instruction:
        return [f"task: {name}the user's own message is the prompt (conversational data)"]
    return [f"task: {name}{template.instruction!r} ({template.input_label} → {template.output_label})"]


def rendered_prompt_lines(config: RunConfig, dataset, split) -> list[str]:
    """One query's zero-shot prompt exactly as the first policy receives it (its chat template applied)."""
    from persalign.core.prompts import PromptFormatter
    from persalign.models.checks import policy_tokenizer

    query_ids = split.query_ids()
    if not query_ids:
        return []
    tokenizer = policy_tokenizer(config.policies[0], config.cache_dir)
    formatter = PromptFormatter(tokenizer, dataset.task, config.generation.max_prompt_tokens)
    comparison = next(c for c in dataset.comparisons if c.id == query_ids[0])
    text = tokenizer.decode(formatter.prompt_ids(comparison.prompt, history=comparison.history))
    return ["", f"one query prompt as {config.policies[0]} receives it (zero-shot; ICL adds the user's "
                "demonstrations as earlier turns):", *("  | " + line for line in text.splitlines())]


def summarize_data(config: RunConfig, examples: int = 3) -> str:
    dataset = build_dataset(config.data, lambda: load_embedder(config.data.embedder, config.cache_dir), config.split)
    per_user = np.array([len(v) for v in dataset.comparisons_by_user().values()])
    split = make_split(dataset, config.split)
    lines = [
        f"data set: {dataset.name}",
        *task_lines(dataset.task),
        f"users: {len(per_user)}; pairs: {len(dataset.comparisons)}; completions: {len(dataset.completions)}",
        f"pairs per user: mean {per_user.mean():.1f}, min {per_user.min()}, max {per_user.max()}",
        f"split: {len(split.train_users)} train users ({sum(map(len, split.train.values()))} train, "
        f"{sum(map(len, split.heldout.values()))} held-out pairs); {len(split.adapt_users)} adaptation users "
        f"({sum(map(len, split.support.values()))} support, {sum(map(len, split.query.values()))} query pairs)",
        "notes: " + ", ".join(f"{k}={v}" for k, v in dataset.notes.items())
        + f", query_pairs_seen_in_training_dropped={split.query_seen_in_training}",
        *[prompts_cut_line(config, dataset, split, policy) for policy in config.policies],
        *needs_lines(len(split.adapt_users), len(config.methods)),
        *rendered_prompt_lines(config, dataset, split),
        "",
        "examples:",
    ]
    for comparison in dataset.comparisons[:: max(1, len(dataset.comparisons) // examples)][:examples]:
        lines += [
            f"- user: {comparison.user}",
            f"  prompt:   {comparison.prompt[:160]}",
            f"  chosen:   {comparison.chosen}",
            f"  rejected: {comparison.rejected}",
        ]
    return "\n".join(lines)

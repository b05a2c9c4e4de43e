"""Cells of policy-side methods (P-DPO): train on the policy, adapt, generate with the user's soft tokens.

No reward model and no ARGS: per batch of query examples the method
generates greedily with the user's learnt soft tokens, ranks the chosen and
rejected responses with its implicit reward β[log π_θ − log π_ref] (policy
accuracy), and the generation is scored against the user's own text. Its
rows carry no RM accuracy or win rate, so the report shows "-" there.
Trained parameters live in RUN_DIR/models/LABEL/seed-N like reward models.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from persalign.decoding import clean_generation
from persalign.metrics.ranking import pair_outcome
from persalign.models.loading import load_causal_lm
from persalign.registry import METHODS
from persalign.rewards.lora import attach_lora, load_adapter, save_adapter
from persalign.runner.evaluate import run_cell, score_batch
from persalign.rewards.method import resolve_settings
from persalign.runner.reward_cells import fit_and_adapt, pair_data

VALIDATION_PAIRS = 64  # held-out pairs scored after fitting (forward passes only; logged, not used to stop)


@dataclass
class PolicyCellJob:
    cell: object
    method: object
    lm: object  # the policy (with its LoRA adapter in reward.mode=lora)
    formatter: object
    metrics: list
    batch_size: int
    max_new_tokens: int
    generate: bool = True  # False for pair-only data


def policy_model(config, policy_lm, model_dir):
    """The policy the method trains: the frozen policy itself, or a fresh copy carrying a LoRA adapter."""
    if config.reward.mode == "frozen":
        return policy_lm
    base = load_causal_lm(policy_lm.name, config.device, config.dtype, config.cache_dir)
    adapter = model_dir / "adapter"
    if adapter.exists():
        return load_adapter(base, adapter)
    return attach_lora(base, config.reward.lora_rank, config.reward.lora_alpha)


def train_or_load_policy_method(method_config, label, seed, config, dataset, split, policy_lm, formatter,
                                model_dir, log):
    method_cls = METHODS.get(method_config.name)
    lm = policy_model(config, policy_lm, model_dir)
    if (model_dir / "head.json").exists():
        return method_cls.load(model_dir), lm, json.loads((model_dir / "train_log.json").read_text())
    settings = resolve_settings(method_cls, method_config, config.reward, seed)
    method = method_cls(lm.model.config.hidden_size, settings)
    train = pair_data(dataset, split.train, formatter, split.train_users)
    val = pair_data(dataset, split.heldout, formatter, split.train_users)
    val = val.subset(list(range(0, len(val), max(1, len(val) // VALIDATION_PAIRS)))[:VALIDATION_PAIRS])
    fit_log, info = fit_and_adapt(method, lm, train, val, dataset, split, formatter)
    method.save(model_dir)
    if config.reward.mode == "lora":
        save_adapter(lm, model_dir / "adapter")
    (model_dir / "train_log.json").write_text(json.dumps(info, indent=2))
    log(f"trained {label} seed {seed}: {fit_log.steps} steps, val acc {fit_log.best_val_accuracy:.2f}, "
        f"fit {info['fit_s']:.1f}s, adapt {info['adapt_s']:.1f}s")
    return method.eval(), lm, info


def evaluate_policy_batch(job: PolicyCellJob, batch, batch_index: int) -> tuple[list[dict], dict]:
    timings = {"batch": batch_index}
    users = [ex.comparison.user for ex in batch]
    prompts = [job.formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history) for ex in batch]
    start = time.perf_counter()
    generations = [None] * len(batch)
    if job.generate:
        generated = job.method.generate(job.lm, users, prompts, job.max_new_tokens)
        generations = [clean_generation(job.lm.tokenizer, ids) for ids in generated]
    timings["generation_s"] = time.perf_counter() - start

    start = time.perf_counter()
    chosen = [job.formatter.response_ids(ex.comparison.chosen) for ex in batch]
    rejected = [job.formatter.response_ids(ex.comparison.rejected) for ex in batch]
    implicit = job.method.implicit_rewards(job.lm, users * 2, prompts * 2, chosen + rejected, job.batch_size)
    timings["scoring_s"] = time.perf_counter() - start

    scores = score_batch(job.metrics, job.generate, generations, batch, timings)

    n, rows = len(batch), []
    for i, ex in enumerate(batch):
        outcome = pair_outcome(implicit[i], implicit[n + i])
        rows.append({
            "id": ex.id, "user": ex.comparison.user, "batch": batch_index,
            "prompt": ex.comparison.prompt, "reference": ex.reference, "generation": generations[i],
            "s_chosen": float(implicit[i]), "s_rejected": float(implicit[n + i]),
            "policy_correct": outcome["correct"], "policy_tie": outcome["tie"], **scores[i],
        })
    return rows, timings


def run_policy_method_cell(cell, method_config, label, decoder_index, config, store, dataset, split, examples,
                           policy_lm, formatter, metrics, model_dir, log) -> dict:
    method, lm, info = train_or_load_policy_method(method_config, label, cell.seed, config, dataset, split,
                                                   policy_lm, formatter, model_dir, log)
    job = PolicyCellJob(cell, method, lm, formatter, metrics, config.generation.batch_size,
                        config.generation.max_new_tokens, bool(dataset.completions))
    settings = {"decoder_name": "soft_prompt", "method": method_config.name, "decoder_index": decoder_index,
                "reward_mode": config.reward.mode, "training": {k: v for k, v in info.items() if k != "history"}}
    result = run_cell(job, store, examples, settings, evaluate_batch=evaluate_policy_batch, seed_dependent=True)
    log(f"{label} | {policy_lm.name} | seed {cell.seed}: policy acc {result['policy_accuracy']:.2f}, "
        f"ROUGE-1 {result.get('rouge1', float('nan')):.2f}")
    return result

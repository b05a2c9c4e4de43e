"""The reward-method part of `persalign run`: one ARGS cell per method × policy × seed.

Trained heads (and LoRA adapters) live in RUN_DIR/models/METHOD/seed-N; frozen
backbone features in the cache dir (features/NAME-FINGERPRINT.safetensors,
keyed by a fingerprint of the weights and the exact token ids), so a re-run,
another run or another policy reuses them; the chosen λ is kept in the cell
folder as lambda.json.
"""

from __future__ import annotations

import json
import re
import time

from persalign.errors import ConfigError
from persalign.models.loading import load_causal_lm
from persalign.prompts import PromptFormatter
from persalign.registry import METHODS
from persalign.models.aliases import default_cache_dir
from persalign.rewards.backbone import RewardBackbone, weights_fingerprint
from persalign.rewards.lora import attach_lora, load_adapter, save_adapter
from persalign.runner.best_of_n_cells import (
    BestOfNCellJob, SampleStore, add_curves, evaluate_bon_batch, summarize_curves,
)
from persalign.runner.evaluate import run_cell
from persalign.runner.policy_cells import run_policy_method_cell
from persalign.runner.reward_cells import (
    RewardCellJob, choose_lambda, evaluate_reward_batch, train_or_load, zero_shot_generations,
)
from persalign.runner.store import Cell


def method_labels(config) -> list[str]:
    labels = [m.label or METHODS.get(m.name).display for m in config.methods]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"methods: labels must be unique, repeated: {repeated} (set `label`)")
    return labels


def reward_cells(config) -> list[Cell]:
    cells = []
    for method_config, label in zip(config.methods, method_labels(config)):
        policy_side = getattr(METHODS.get(method_config.name), "policy_side", False)
        names = [label] if config.args.enabled or policy_side else []
        names += [bon_label(label)] if config.best_of_n.enabled and not policy_side else []
        cells += [Cell(p, name, seed) for p in config.policies for name in names for seed in config.seeds]
    return cells


class RewardBackbones:
    """Loads each RM backbone once; frozen + same model as the policy = shared fast path."""

    def __init__(self, config, store):
        self.config, self.store, self._frozen = config, store, {}
        if config.reward.mode not in ("frozen", "lora"):
            raise ConfigError(f"reward.mode must be frozen or lora, got {config.reward.mode!r}")

    def get(self, policy_lm, method_label: str, seed: int, task: str) -> tuple[RewardBackbone, PromptFormatter]:
        cfg = self.config
        name = cfg.reward.backbone or cfg.policies[0]
        slug = re.sub(r"[^\w.-]+", "_", name)
        if cfg.reward.mode == "frozen":
            if name not in self._frozen:
                lm = policy_lm if name == policy_lm.name else load_causal_lm(name, cfg.device, cfg.dtype, cfg.cache_dir)
                key = f"{slug}-{weights_fingerprint(lm.model)}"  # token ids in the keys fix the prompt format
                self._frozen[name] = RewardBackbone(lm, key, default_cache_dir(cfg.cache_dir))
            backbone = self._frozen[name]
        else:
            base = load_causal_lm(name, cfg.device, cfg.dtype, cfg.cache_dir)
            adapter = self.store.root / "models" / _slug(method_label) / f"seed-{seed}" / "adapter"
            lm = load_adapter(base, adapter) if adapter.exists() else attach_lora(base, cfg.reward.lora_rank,
                                                                                  cfg.reward.lora_alpha)
            backbone = RewardBackbone(lm, f"{slug}-lora", trainable=not adapter.exists())
        backbone.batch_size = cfg.reward.feature_batch_size
        formatter = PromptFormatter(backbone.lm.tokenizer, task, cfg.generation.max_prompt_tokens)
        return backbone, formatter


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def bon_label(label: str) -> str:
    return f"{label} (Best-of-N)"


def run_reward_cells(config, store, dataset, split, examples, policy_lm, policy_formatter, metrics,
                     backbones: RewardBackbones, decoder_count: int, log, progress=None) -> None:
    labels = method_labels(config)
    metrics_by_name = dict(zip(config.metrics.names, metrics))
    if "rouge" not in metrics_by_name:
        from persalign.metrics.generation import RougeMetric

        metrics_by_name["rouge"] = RougeMetric(config.metrics)
    shared = {"zero_shot": None, "memo": {}, "metrics_by_name": metrics_by_name,
              "samples": SampleStore(store.root, policy_lm, policy_formatter, metrics, config.best_of_n,
                                     config.generation.max_new_tokens)}
    for index, (method_config, label) in enumerate(zip(config.methods, labels)):
        policy_side = getattr(METHODS.get(method_config.name), "policy_side", False)
        for seed in config.seeds:
            cell = Cell(policy_lm.name, label, seed)
            bon_cell = Cell(policy_lm.name, bon_label(label), seed)
            need_args = (config.args.enabled or policy_side) and not store.is_complete(cell)
            need_bon = config.best_of_n.enabled and not policy_side and not store.is_complete(bon_cell)
            if not (need_args or need_bon):
                continue
            model_dir = store.root / "models" / _slug(label) / f"seed-{seed}"
            if policy_side:
                run_policy_method_cell(cell, method_config, label, decoder_count + index, config, store, dataset,
                                       split, examples, policy_lm, policy_formatter, metrics, model_dir, log)
                if progress:
                    progress.tick(label)
                continue
            backbone, rm_formatter = backbones.get(policy_lm, label, seed, dataset.task)
            trained = train_or_load(method_config, label, seed, config, dataset, split, backbone, rm_formatter,
                                    model_dir, log)
            if backbone.trainable:
                save_adapter(backbone.lm, model_dir / "adapter")
                backbone.trainable = False
            if need_args:
                _run_args_cell(cell, trained, method_config, label, decoder_count + index, config, store, dataset,
                               split, examples, policy_lm, policy_formatter, metrics, shared, log)
                if progress:
                    progress.tick(label)
            if need_bon:
                job = BestOfNCellJob(bon_cell, trained, shared["samples"], sorted(config.best_of_n.ns),
                                     config.generation.batch_size)
                settings = {"decoder_name": "best_of_n", "method": method_config.name,
                            "decoder_index": decoder_count + len(labels) + index, "ns": job.ns,
                            "temperature": config.best_of_n.temperature, "reward_mode": config.reward.mode,
                            "training": {k: v for k, v in trained.log.items() if k != "history"}}
                run_cell(job, store, examples, settings, evaluate_batch=evaluate_bon_batch, seed_dependent=True)
                result = add_curves(store, bon_cell, job.ns)
                log(f"{bon_cell.decoder} | {policy_lm.name} | seed {seed}: RM acc {result['rm_accuracy']:.2f}, "
                    f"{summarize_curves(result)}")
                if progress:
                    progress.tick(bon_cell.decoder)


def _run_args_cell(cell, trained, method_config, label, decoder_index, config, store, dataset, split, examples,
                   policy_lm, policy_formatter, metrics, shared, log) -> None:
    lambda_path = store.cell_dir(cell) / "lambda.json"
    if lambda_path.exists():
        choice = json.loads(lambda_path.read_text())
    else:
        started = time.perf_counter()
        choice = choose_lambda(config.args, trained, policy_lm, policy_formatter, dataset, split,
                               shared["metrics_by_name"], bool(dataset.completions), config.generation.batch_size,
                               config.generation.max_new_tokens, shared["memo"])
        choice["seconds"] = time.perf_counter() - started
        lambda_path.parent.mkdir(parents=True, exist_ok=True)
        lambda_path.write_text(json.dumps(choice, indent=2))
    generate = bool(dataset.completions)
    if shared["zero_shot"] is None and generate:
        shared["zero_shot"] = zero_shot_generations(store, policy_lm, policy_formatter, examples,
                                                    config.generation.batch_size, config.generation.max_new_tokens)
    job = RewardCellJob(cell, trained, policy_lm, policy_formatter, choice["lambda"], config.args.top_k,
                        metrics, config.generation.batch_size, config.generation.max_new_tokens, shared["zero_shot"],
                        shared["memo"], generate)
    settings = {"decoder_name": "args", "method": method_config.name, "decoder_index": decoder_index,
                "lambda": choice["lambda"], "lambda_rule": choice["rule"], "lambda_s": choice.get("seconds", 0.0),
                "top_k": config.args.top_k,
                "reward_mode": config.reward.mode, "training": {k: v for k, v in trained.log.items()
                                                                 if k != "history"}}
    result = run_cell(job, store, examples, settings, evaluate_batch=evaluate_reward_batch, seed_dependent=True)
    log(f"{label} | {policy_lm.name} | seed {cell.seed}: λ={choice['lambda']} ({choice['rule']}), "
        f"RM acc {result['rm_accuracy']:.2f}, policy acc {result['policy_accuracy']:.2f}, "
        f"ROUGE-1 {result.get('rouge1', float('nan')):.2f}, win rate {result.get('win_rate', float('nan')):.2f}")

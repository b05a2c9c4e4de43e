"""`persalign run`: every cell of a config, resumable, then the report.

    persalign run demo
    persalign run configs/news_category.yaml -o runs/news seeds=[0,1,2]
"""

from __future__ import annotations

import time
from pathlib import Path

from persalign.config import RunConfig, to_dict
from persalign.config_checks import validate
from persalign.data.build import build_dataset
from persalign.data.split import make_split
from persalign.decoders.base import EvalContext
from persalign.errors import ConfigError
from persalign.models.device import resolve_device
from persalign.models.embedders import load_embedder
from persalign.models.loading import load_causal_lm
from persalign.prompts import PromptFormatter
from persalign.registry import DECODERS, METRICS
from persalign.runner import provenance
from persalign.runner.evaluate import CellJob, query_examples, run_cell
from persalign.runner.lock import locked
from persalign.runner.reward_run import RewardBackbones, reward_cells, run_reward_cells
from persalign.runner.store import Cell, RunStore, check_distinct_dirs


def make_decoders(config: RunConfig) -> list:
    decoders = [DECODERS.get(d.name)(d) for d in config.decoders]
    labels = [d.label for d in decoders]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"decoders: labels must be unique, repeated: {duplicates} (set `label`)")
    return decoders


def planned_cells(config: RunConfig, decoders: list) -> list[tuple[Cell, object, object]]:
    """Every (cell, decoder, decoder config); seed-free decoders run once (first seed)."""
    cells = []
    for policy in config.policies:
        for decoder, decoder_config in zip(decoders, config.decoders):
            seeds = config.seeds if decoder.seed_dependent else config.seeds[:1]
            cells += [(Cell(policy, decoder.label, seed), decoder, decoder_config) for seed in seeds]
    return cells


class Progress:
    """Cells done out of the whole sweep, with an ETA from the mean time of the cells run so far."""

    def __init__(self, total: int, already_done: int, log):
        self.total, self.done, self.log = total, already_done, log
        self.started, self.run_now = time.perf_counter(), 0

    def tick(self, what: str) -> None:
        self.done += 1
        self.run_now += 1
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.run_now * (self.total - self.done)
        self.log(f"progress {self.done}/{self.total} cells ({what}); elapsed {elapsed / 60:.1f} min, "
                 f"ETA {eta / 60:.1f} min (mean cell time so far)")


def run(config: RunConfig, out_dir: str | Path, log=print) -> RunStore:
    """Every cell of `config` into `out_dir`, holding the directory's lock (a second run is refused)."""
    validate(config)
    with locked(out_dir, log):
        return _run_cells(config, out_dir, log)


def _run_cells(config: RunConfig, out_dir: str | Path, log) -> RunStore:
    started = time.perf_counter()
    store = RunStore(out_dir)
    device = str(resolve_device(config.device))
    store.prepare(to_dict(config), provenance.collect(device, config.seeds))
    decoders = make_decoders(config)
    cells = planned_cells(config, decoders)
    method_cells = reward_cells(config)
    check_distinct_dirs([c[0] for c in cells] + method_cells)
    todo = [c for c in cells if not store.is_complete(c[0])]
    method_todo = [c for c in method_cells if not store.is_complete(c)]
    total = len(cells) + len(method_cells)
    log(f"run dir {store.root}: {total} cells, {total - len(todo) - len(method_todo)} already complete")
    if not todo and not method_todo:
        return store
    progress = Progress(total, total - len(todo) - len(method_todo), log)

    embedder = load_embedder(config.data.embedder, config.cache_dir)
    dataset = build_dataset(config.data, lambda: embedder, config.split)
    split = make_split(dataset, config.split)
    examples = query_examples(dataset, split)
    log(f"data {dataset.name}: {len(dataset.users())} users, {len(dataset.comparisons)} pairs; "
        f"{len(split.adapt_users)} adaptation users, {len(examples)} query examples")
    context = EvalContext(dataset, split, embedder)
    metrics = [METRICS.get(name)(config.metrics, config.cache_dir) for name in config.metrics.names]
    metric_settings = {k: v for m in metrics for k, v in m.settings().items()}

    backbones = RewardBackbones(config, store)
    for policy in config.policies:
        policy_cells = [c for c in todo if c[0].policy == policy]
        if not policy_cells and not any(c.policy == policy for c in method_todo):
            continue
        lm = load_causal_lm(policy, config.device, config.dtype, config.cache_dir)
        formatter = PromptFormatter(lm.tokenizer, dataset.task, config.generation.max_prompt_tokens)
        for index, (cell, decoder, decoder_config) in enumerate(policy_cells, 1):
            job = CellJob(cell, decoder, lm, formatter, context, metrics,
                          config.generation.batch_size, config.generation.max_new_tokens, bool(dataset.completions))
            settings = {"decoder_name": decoder_config.name, "shots": decoder_config.shots,
                        "decoder_index": config.decoders.index(decoder_config), **metric_settings}
            result = run_cell(job, store, examples, settings)
            log(f"[{index}/{len(policy_cells)}] {cell.decoder} | {policy} | seed {cell.seed}: "
                f"policy acc {result['policy_accuracy']:.2f}, ROUGE-1 {result.get('rouge1', float('nan')):.2f}")
            progress.tick(cell.decoder)
        if config.methods:
            run_reward_cells(config, store, dataset, split, examples, lm, formatter, metrics, backbones,
                             len(config.decoders), log, progress)
    log(f"finished in {time.perf_counter() - started:.0f} s, peak memory {provenance.peak_memory_mib():.0f} MiB")
    return store

"""What the paper's scales cost at the paper's Pref-LaMP size (issue #40 point 4): a projection table.

For each Qwen2.5 scale (its config only, no weights), the full study's deployments and seeds
(configs/study_news_full.yaml) at Pref-LaMP's size in the paper (Table 1: 485 training users x 48.8
pairs, 126 adaptation users x 49.2 pairs, one query item per adaptation user as in its main text), with
the news data's mean token lengths (SmolLM2's BPE, close to Qwen's):

- counted work of each stage (persalign's cost model, as `persalign plan` counts it: an upper bound) and
  its time on one H100 at a stated share of its dense bf16 peak, plus P-DPO's training (a backward to the
  soft prompt through the whole policy: ~4 x 2N FLOPs per token, no weight gradients);
- peak memory of each stage on the GPU: the bf16 weights, plus a batch's KV cache and float32 log-probs,
  plus (P-DPO) the backward's activations per token as bench_scales measured them on this machine;
- disk: the weights, and the frozen feature cache in bf16 (every distinct response token and the last
  prompt token of every distinct prompt, hidden size x 2 bytes), with the paper's 0.5B reward backbone and
  with the policy itself as the backbone (persalign's default: `reward.backbone` unset).

Projections until measured on a GPU (benchmarks/bench_gpu.py).

    python benchmarks/paper_scale.py --bench docs/bench_scales.jsonl
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

from common import ROOT, emit, existing_file, share

from persalign.core.config import load_config
from persalign.planner.plan import GPU_PEAKS, Design, design_of, shape_from_config, stage_work

GiB = 2**30
PAPER = {"train_users": 485, "train_pairs_per_user": 48.8, "adapt_users": 126, "adapt_pairs_per_user": 49.2}
SIZES = ["0.5b", "1.5b", "3b", "7b"]
BATCH = 16  # generation.batch_size of the study
H100_BANDWIDTH = 3.35e12  # bytes/s, HBM3 (SXM) as NVIDIA states it
BANDWIDTH_SHARE = 0.5  # of that reached by a decode step


def paper_design(news: Design, heldout_fraction: float = 0.1, support_fraction: float = 0.5) -> Design:
    """The news design's cells and token lengths at the paper's user and pair counts."""
    train = PAPER["train_users"] * PAPER["train_pairs_per_user"]
    support = PAPER["adapt_users"] * PAPER["adapt_pairs_per_user"] * support_fraction
    pairs = {"train": round(train * (1 - heldout_fraction)), "heldout": round(train * heldout_fraction),
             "support": round(support)}
    read = sum(news.pairs.values())
    design = Design(PAPER["train_users"] + PAPER["adapt_users"], PAPER["train_users"],
                    {f"user{i}": 1 for i in range(PAPER["adapt_users"])}, {}, pairs, news.cells, news.seeds,
                    news.trained, news.prompt_tokens, news.demo_tokens, news.response_tokens)
    design.distinct_prompts = round(news.distinct_prompts / read * sum(pairs.values()))
    design.distinct_responses = round(news.distinct_responses / read * sum(pairs.values()))
    return design


def pdpo_training_flops(config, design: Design, params: float) -> float:
    """Fitting (max_steps x 8 pairs) and each adaptation user's steps, chosen and rejected: ~4 x 2N per token."""
    method = next((m for m in config.methods if m.name == "pdpo"), None)
    if method is None:
        return 0.0
    from persalign.core.registry import METHODS
    from persalign.rewards.method import resolve_settings

    settings = resolve_settings(METHODS.get("pdpo"), method, config.reward, config.seeds[0])
    steps = settings.max_steps + len(design.queries) * settings.adapt_epochs
    tokens = 2 * (design.prompt_tokens + design.response_tokens) * 8
    return len(config.seeds) * steps * tokens * 4 * 2 * params


def decode_passes(config, design: Design) -> int:
    """Forward passes that each read every weight once for a handful of tokens (memory-bound on a GPU):
    decode steps of every cell's batches, ARGS's two per step (policy, candidates), the λ choice's ARGS
    runs, Best-of-N's samples."""
    batches = -(-len(design.queries) // BATCH)
    new = config.generation.max_new_tokens
    passes = 0
    for (kind, _), cells in design.cells.items():
        passes += cells * batches * new * (2 if kind == "args" else 0 if kind == "best_of_n" else 1)
    argses = sum(n for (kind, _), n in design.cells.items() if kind == "args")
    nonzero = len([lam for lam in config.args.lambdas if lam != 0])
    passes += argses * -(-config.args.validation_size * nonzero // BATCH) * new * 2
    if any(kind == "best_of_n" for kind, _ in design.cells):
        passes += design.seeds * -(-len(design.queries) * max(config.best_of_n.ns) // BATCH) * new
    return passes


def kv_and_logits_bytes(model_config, batch: int, context: float, rows_of_logits: int) -> float:
    head_dim = model_config.hidden_size // model_config.num_attention_heads
    kv = batch * context * model_config.num_hidden_layers * 2 * model_config.num_key_value_heads * head_dim * 2
    return kv + 2 * rows_of_logits * model_config.vocab_size * 4


def stage_memory(config, design: Design, size: str, measured: dict | None) -> dict[str, float]:
    """Peak GPU memory (GiB) per stage: weights + batch state (+ P-DPO's backward, measured per token here)."""
    from persalign.models.qwen_shapes import qwen_config

    model_config, rm_config = qwen_config(size), qwen_config("0.5b")
    weights = params_of(size) * 2
    rm_weights = params_of("0.5b") * 2
    new, k = config.generation.max_new_tokens, config.args.top_k
    longest = design.prompt_tokens + 8 * design.demo_tokens + new
    generation = weights + kv_and_logits_bytes(model_config, BATCH, longest, BATCH)
    args = (weights + rm_weights + kv_and_logits_bytes(model_config, BATCH, design.prompt_tokens + new, BATCH)
            + kv_and_logits_bytes(rm_config, BATCH, design.prompt_tokens + new + k, 0))
    features = rm_weights + kv_and_logits_bytes(rm_config, BATCH, design.prompt_tokens + design.response_tokens, 0)
    out = {"generation (8-shot ICL)": generation, "ARGS (policy + 0.5B RM)": args,
           "Best-of-N": weights + kv_and_logits_bytes(model_config, BATCH * max(config.best_of_n.ns or [1]),
                                                      design.prompt_tokens + new, BATCH),
           "features (0.5B backbone)": features}
    if measured and "pdpo_per_token" in measured:
        out["P-DPO step (8 pairs)"] = weights + measured["pdpo_per_token"] * 16 * (design.prompt_tokens
                                                                                  + design.response_tokens)
    return {stage: value / GiB for stage, value in out.items()}


@functools.cache
def params_of(size: str) -> float:
    import torch
    from transformers import Qwen2ForCausalLM

    from persalign.models.qwen_shapes import qwen_config

    with torch.device("meta"):
        return float(sum(p.numel() for p in Qwen2ForCausalLM(qwen_config(size)).parameters()))


def bench_tokens() -> int:
    """Tokens of bench_scales's P-DPO step (8 soft vectors, then the first demo prompt and its response)."""
    from persalign.core.prompts import PromptFormatter
    from persalign.data.demo_authors import demo_records
    from persalign.models.qwen_shapes import qwen_tokenizer

    record = demo_records()[0]
    formatter = PromptFormatter(qwen_tokenizer(), "headline")
    return 8 + len(formatter.prompt_ids(record["input"])) + len(formatter.response_ids(record["output"]))


def measured_scales(path: Path | None) -> dict[str, dict]:
    """bench_scales's JSON lines by size, with P-DPO's backward bytes per token added."""
    if path is None:
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    tokens = bench_tokens()
    out = {}
    for row in rows:
        extra = (row["pdpo_step"]["peak_gib"] - row["generation"]["peak_gib"]) * GiB / tokens
        out[row["size"]] = {**row, "pdpo_per_token": extra}
    return out


def scale_rows(config, design: Design, size: str, measured: dict, gpu_flops: float) -> list[dict]:
    from persalign.models.qwen_shapes import qwen_config

    work = stage_work(config, design, shape_from_config(qwen_config(size)))
    work["P-DPO training"] = pdpo_training_flops(config, design, params_of(size))
    memory = stage_memory(config, design, size, measured.get(size))
    rows = [{"size": size, "stage": stage, "tflop": flops / 1e12, "h100_hours": flops / gpu_flops / 3600}
            for stage, flops in work.items()]
    passes = decode_passes(config, design)  # a floor of its own: each pass reads the bf16 weights
    rows.append({"size": size, "stage": "decode passes (weight reads)", "passes": passes,
                 "h100_hours": passes * params_of(size) * 2 / (H100_BANDWIDTH * BANDWIDTH_SHARE) / 3600})
    rows += [{"size": size, "stage": stage, "gpu_gib": gib} for stage, gib in memory.items()]
    return rows


def disk_row(design: Design, size: str) -> dict:
    """Weights and the bf16 feature cache (GiB), with the 0.5B backbone and with the policy as backbone."""
    from persalign.models.qwen_shapes import qwen_config

    tokens = design.distinct_responses * design.response_tokens + design.distinct_prompts
    return {"size": size, "weights_gib": params_of(size) * 2 / GiB,
            "features_0.5b_backbone_gib": tokens * qwen_config("0.5b").hidden_size * 2 / GiB,
            "features_policy_backbone_gib": tokens * qwen_config(size).hidden_size * 2 / GiB,
            "feature_tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=lambda t: Path(existing_file(t)), help="bench_scales.py's output (JSON lines)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "study_news_full.yaml"))
    parser.add_argument("--utilisation", type=share, default=0.3, help="share of the H100's dense bf16 peak")
    args = parser.parse_args()
    config = load_config(args.config, [])
    design = paper_design(design_of(config), config.split.heldout_fraction, config.split.support_fraction)
    gpu_flops = GPU_PEAKS["h100"] * 1e12 * args.utilisation
    measured = measured_scales(args.bench)
    print(f"paper Pref-LaMP size: {design.pairs} pairs, {len(design.queries)} query items; prompt "
          f"{design.prompt_tokens:.0f}, response {design.response_tokens:.0f} tokens; {sum(design.cells.values())} "
          f"cells per policy; H100 at {GPU_PEAKS['h100']:g} TFLOP/s x {args.utilisation:g}")
    rows, disks = [], []
    for size in SIZES:
        rows += scale_rows(config, design, size, measured, gpu_flops)
        disks.append(disk_row(design, size))
    print(markdown_tables(rows, disks))
    emit({"benchmark": "paper_scale", "design": design.pairs, "rows": rows, "disk": disks})


def markdown_tables(rows: list[dict], disks: list[dict]) -> str:
    """H100 hours and GPU GiB per stage (a column per scale), then disk."""
    lines = []
    for key, title, scale in (("h100_hours", "projected H100 minutes", 60), ("gpu_gib", "projected peak GPU GiB", 1)):
        stages = list(dict.fromkeys(r["stage"] for r in rows if key in r))
        lines += ["", f"| {title} | " + " | ".join(SIZES) + " |", "|---" * (len(SIZES) + 1) + "|"]
        for stage in stages:
            found = {r["size"]: r[key] * scale for r in rows if r["stage"] == stage and key in r}
            cells = [found.get(size) for size in SIZES]
            lines.append(f"| {stage} | " + " | ".join("–" if v is None else f"{v:.3g}" for v in cells) + " |")
    lines += ["", "| disk (GiB) | " + " | ".join(SIZES) + " |", "|---" * (len(SIZES) + 1) + "|"]
    for key in ("weights_gib", "features_0.5b_backbone_gib", "features_policy_backbone_gib"):
        lines.append(f"| {key.removesuffix('_gib')} | " + " | ".join(f"{d[key]:.3g}" for d in disks) + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()

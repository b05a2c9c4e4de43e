"""Reward-method cells: train (once per method × seed), adapt, choose λ, deploy with ARGS.

For each (method, seed): fit on the train users' pairs (held-out pairs for
early stopping), adapt every adaptation user on their support pairs, save the
result in RUN_DIR/models/METHOD/seed-N (safetensors). For each policy: choose
λ (appendix F.2), then per batch of query examples: ARGS generation (Eq. 1),
policy accuracy with s_personal (Eq. 6), RM accuracy (Eq. 2), the win rate of
the ARGS output over the zero-shot output under the method's own RM (Table 5),
and ROUGE / BERTScore against the user's own text.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from persalign.args_decoding import RewardGuide, args_decode
from persalign.decoding import clean_generation, generate_texts
from persalign.metrics.ranking import pair_outcome
from persalign.rewards.backbone import RewardBackbone
from persalign.rewards.policy_scoring import logprob_sums, reward_sums, s_rgd
from persalign.rewards.lambda_select import best_lambda, harmonic_mean, policy_accuracy_curve
from persalign.rewards.method import precompute_features, resolve_settings
from persalign.rewards.train import PairData
from persalign.registry import METHODS
from persalign.runner.evaluate import score_batch
from persalign.runner.store import Cell
from persalign.scoring import response_logprobs


def pair_data(dataset, ids_by_user: dict[str, list[str]], formatter, users: list[str]) -> PairData:
    comparisons = {c.id: c for c in dataset.comparisons}
    data = PairData([], [], [], [])
    for user in users:
        for pair_id in ids_by_user.get(user, []):
            c = comparisons[pair_id]
            data.users.append(user)
            data.prompts.append(formatter.prompt_ids(c.prompt, history=c.history))
            data.chosen.append(formatter.response_ids(c.chosen))
            data.rejected.append(formatter.response_ids(c.rejected))
    return data


@dataclass
class TrainedReward:
    method: object
    backbone: RewardBackbone
    log: dict = field(default_factory=dict)


def fit_and_adapt(method, where, train: PairData, val: PairData, dataset, split, formatter):
    """Fit on the train users, adapt every adaptation user on its support pairs; (fit log, timing + log info).

    `where` is the reward backbone (reward heads) or the policy itself (policy-side methods).
    """
    start = time.perf_counter()
    fit_log = method.fit(where, train, val)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    for user in split.adapt_users:
        method.adapt(where, user, pair_data(dataset, split.support, formatter, [user]))
    return fit_log, {"fit_s": fit_s, "adapt_s": time.perf_counter() - start, "epochs": fit_log.epochs,
                     "steps": fit_log.steps, "best_val_accuracy": fit_log.best_val_accuracy,
                     "settings": method.settings.__dict__, "history": fit_log.history}


def train_or_load(method_config, label, seed, config, dataset, split, backbone, formatter, model_dir, log) -> TrainedReward:
    """Fit + adapt, or load what an earlier (possibly interrupted) run saved."""
    method_cls = METHODS.get(method_config.name)
    if (model_dir / "head.json").exists():
        method = method_cls.load(model_dir)
        return TrainedReward(method, backbone, json.loads((model_dir / "train_log.json").read_text()))
    settings = resolve_settings(method_cls, method_config, config.reward, seed)
    method = method_cls(backbone.hidden_size, settings)
    train = pair_data(dataset, split.train, formatter, split.train_users)
    val = pair_data(dataset, split.heldout, formatter, split.train_users)
    start = time.perf_counter()
    precompute_features(method, backbone, train, val)
    features_s = time.perf_counter() - start
    fit_log, timing = fit_and_adapt(method, backbone, train, val, dataset, split, formatter)
    info = {"features_s": features_s, "init": getattr(method, "init_note", None), **timing}
    method.save(model_dir)
    (model_dir / "train_log.json").write_text(json.dumps(info, indent=2))
    log(f"trained {label} seed {seed}: {fit_log.epochs} epochs, val acc {fit_log.best_val_accuracy:.2f}, "
        f"fit {info['fit_s']:.1f}s, adapt {info['adapt_s']:.1f}s")
    return TrainedReward(method.eval(), backbone, info)


def validation_pairs(dataset, split, formatter, size: int | None) -> tuple[PairData, list[str]]:
    """The train users' held-out pairs (every `step`-th when `size` is set) and their ids, in the same order."""
    val = pair_data(dataset, split.heldout, formatter, split.train_users)
    ids = [i for user in split.train_users for i in split.heldout.get(user, [])]
    if size:
        step = max(1, len(val) // size)
        keep = list(range(0, len(val), step))[:size]
        val, ids = val.subset(keep), [ids[i] for i in keep]
    return val, ids


def choose_lambda(args_config, trained, policy, formatter, dataset, split, metrics_by_name, has_completions,
                  batch_size, max_new_tokens, memo: dict | None = None) -> dict:
    """Appendix F.2: returns {'lambda', 'rule', 'curve'}."""
    grid = list(args_config.lambdas)
    rule = args_config.selection
    if rule == "auto":
        rule = "harmonic" if has_completions else "policy_accuracy"
    if rule == "fixed":
        return {"lambda": args_config.fixed_lambda, "rule": "fixed", "curve": {}}
    val, val_ids = validation_pairs(dataset, split, formatter,
                                    args_config.validation_size if rule == "harmonic" else None)
    lp_w = logprob_sums(policy, val.prompts, val.chosen, batch_size, memo)
    lp_l = logprob_sums(policy, val.prompts, val.rejected, batch_size, memo)
    _, r_w = reward_sums(trained.method, trained.backbone, val.users, val.prompts, val.chosen)
    _, r_l = reward_sums(trained.method, trained.backbone, val.users, val.prompts, val.rejected)
    accuracy = policy_accuracy_curve(lp_w, lp_l, r_w, r_l, grid)
    curve = {"lambda": grid, "policy_accuracy": accuracy.tolist()}
    if rule == "harmonic":
        completions = dataset.completion_by_id()
        references = [completions[i].reference for i in val_ids]  # each pair's own reference
        curve.update(harmonic_curve(args_config, trained, policy, formatter, val, references, metrics_by_name["rouge"],
                                    accuracy, batch_size, max_new_tokens))
        objective = curve["harmonic"]
    else:
        objective = accuracy
    lam, _ = best_lambda(grid, objective)
    return {"lambda": lam, "rule": rule, "curve": curve}


def harmonic_curve(args_config, trained, policy, formatter, val, references, rouge, accuracy, batch_size,
                   max_new_tokens) -> dict:
    """ARGS on the validation prompts at each λ: ROUGE-1, inverse perplexity and their harmonic mean with accuracy."""
    out = {"rouge1": [], "inverse_perplexity": [], "harmonic": []}
    for lam, acc in tqdm(list(zip(args_config.lambdas, accuracy)), desc="choosing λ (ARGS on validation)",
                         leave=False):
        guide = RewardGuide(trained.backbone.lm, trained.method, val.users)
        rows = []
        for start in range(0, len(val), batch_size):
            guide.users = val.users[start : start + batch_size]
            rows += args_decode(policy, guide, val.prompts[start : start + batch_size], lam,
                                args_config.top_k, max_new_tokens)
        texts = [clean_generation(policy.tokenizer, ids) for ids in rows]
        r1 = float(np.mean([s["rouge1"] for s in rouge.score(texts, references)]) / 100)
        lps = response_logprobs(policy, val.prompts, [formatter.response_ids(t) for t in texts], batch_size)
        inv_ppl = float(np.mean([np.exp(lp.mean()) if len(lp) else 0.0 for lp in lps]))
        out["rouge1"].append(r1)
        out["inverse_perplexity"].append(inv_ppl)
        out["harmonic"].append(harmonic_mean([r1, inv_ppl, acc / 100]))
    return out


@dataclass
class RewardCellJob:
    cell: object
    trained: TrainedReward
    policy: object
    formatter: object
    lam: float
    top_k: int
    metrics: list
    batch_size: int
    max_new_tokens: int
    zero_shot: dict  # example id -> zero-shot generation (for the win rate)
    logprob_memo: dict = field(default_factory=dict)  # shared by every cell of a policy
    generate: bool = True  # False for pair-only data: RM and policy accuracy only (no ARGS output, no win rate)


def evaluate_reward_batch(job: RewardCellJob, batch, batch_index: int) -> tuple[list[dict], dict]:
    timings = {"batch": batch_index}
    users = [ex.comparison.user for ex in batch]
    prompts = [job.formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history) for ex in batch]
    start = time.perf_counter()
    generations = [None] * len(batch)
    if job.generate:
        guide = RewardGuide(job.trained.backbone.lm, job.trained.method, users)
        generated = args_decode(job.policy, guide, prompts, job.lam, job.top_k, job.max_new_tokens)
        generations = [clean_generation(job.policy.tokenizer, ids) for ids in generated]
    timings["generation_s"] = time.perf_counter() - start

    start = time.perf_counter()
    chosen = [job.formatter.response_ids(ex.comparison.chosen) for ex in batch]
    rejected = [job.formatter.response_ids(ex.comparison.rejected) for ex in batch]
    lp = logprob_sums(job.policy, prompts + prompts, chosen + rejected, job.batch_size, job.logprob_memo)
    seq, step_sum = reward_sums(job.trained.method, job.trained.backbone, users * 2, prompts * 2, chosen + rejected)
    if job.generate:
        zero_shot = [job.zero_shot[ex.id] for ex in batch]
        gen_seq, _ = reward_sums(job.trained.method, job.trained.backbone, users * 2, prompts * 2,
                                              [job.formatter.response_ids(t) for t in generations + zero_shot])
    timings["scoring_s"] = time.perf_counter() - start

    scores = score_batch(job.metrics, job.generate, generations, batch, timings)

    n, rows = len(batch), []
    for i, ex in enumerate(batch):
        s_w, s_l = s_rgd(lp[i], step_sum[i], job.lam), s_rgd(lp[n + i], step_sum[n + i], job.lam)
        policy = pair_outcome(s_w, s_l)
        rm = pair_outcome(seq[i], seq[n + i])
        row = {
            "id": ex.id, "user": ex.comparison.user, "batch": batch_index,
            "prompt": ex.comparison.prompt, "reference": ex.reference, "generation": generations[i],
            "lambda": job.lam, "s_chosen": float(s_w), "s_rejected": float(s_l),
            "policy_correct": policy["correct"], "policy_tie": policy["tie"],
            "rm_chosen": float(seq[i]), "rm_rejected": float(seq[n + i]),
            "rm_correct": rm["correct"], "rm_tie": rm["tie"], **scores[i],
        }
        if job.generate:
            win = pair_outcome(gen_seq[i], gen_seq[n + i])
            row.update({"zero_shot_generation": zero_shot[i], "rm_generation": float(gen_seq[i]),
                        "rm_zero_shot": float(gen_seq[n + i]), "win": win["correct"], "win_tie": win["tie"]})
        rows.append(row)
    return rows, timings


def zero_shot_generations(store, policy, formatter, examples, batch_size, max_new_tokens) -> dict[str, str]:
    """Zero-shot outputs for the win rate: reused from the run's Zero-Shot cell when it has them."""
    found = {}
    for meta in store.all_metrics():  # through the store's API: damaged cells are skipped there
        if meta["policy"] == policy.name and meta.get("decoder_name") == "zero_shot":
            found.update({row["id"]: row["generation"] for row in store.read_rows(Cell(meta["policy"],
                                                                                       meta["decoder"], meta["seed"]))})
    missing = [ex for ex in examples if ex.id not in found]
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        texts = generate_texts(policy, [formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history)
                                        for ex in batch], max_new_tokens)
        found.update({ex.id: t for ex, t in zip(batch, texts)})
    return found

"""The selection-crisis analyses, computed only from a run directory's stored rows and metrics.

- Table 2 / Figure 1: RM accuracy vs policy accuracy across reward methods,
  per policy model (Pearson r, Spearman ρ, Kendall τ): the observed correlation of
  the methods' means with a Fisher-z interval across methods (analysis/intervals.py,
  which takes each mean as exact), and the correlation of their TRUE means with each
  metric's reliability, counting the noise each mean carries (analysis/true_correlation.py);
- Table 6: RM accuracy, policy accuracy and win rate vs ROUGE-1 (same statistics);
- Table 5: the RM's own win rate over zero-shot vs the ground-truth gain
  (ROUGE-1 of the method minus zero-shot on the same prompts, and the share of
  prompts where the method's ROUGE-1 really beats zero-shot);
- Finding 3: best ICL variant vs best reward method on ROUGE-1 / ROUGE-L /
  BERTScore-F1, cross-fitted (both "bests" chosen on one half of the users,
  measured on the other, halves swapped; analysis/paired.py), with the
  smallest difference these users could detect and the users a 3-point gap needs.

Per-user values average a method's seeds first, so a user's seeds stay together.
Intervals: analysis/intervals.py (means, correlations) and analysis/paired.py
(Finding 3), each checked by simulation. An ARGS deployment whose chosen λ is 0
in every seed is greedy decoding: it is labelled "METHOD (λ = 0: greedy)" and
Finding 3 compares ICL with the best reward method that steers (λ > 0).

    python -c "from persalign.analysis.study import analyse; print(analyse('runs/news_category'))"
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from persalign.analysis.correlations import STATISTICS, correlate
from persalign.analysis.intervals import PERCENT, correlation_interval, difference_bounds, mean_interval
from persalign.analysis.paired import crossfit_comparison
from persalign.analysis.true_correlation import on_scale, true_correlation
from persalign.decoders.base import properties_of
from persalign.runner.store import Cell, RunStore

GENERATION_METRICS = (("rouge1", "ROUGE-1"), ("rougeL", "ROUGE-L"), ("bertscore_f1", "BERTScore-F1"))
# metric key -> per-example row column whose user-macro mean (x100 for rates) is that metric
ROW_COLUMNS = {"rm_accuracy": ("rm_correct", 100.0), "policy_accuracy": ("policy_correct", 100.0),
               "win_rate": ("win", 100.0), "rouge1": ("rouge1", 1.0), "rougeL": ("rougeL", 1.0),
               "bertscore_f1": ("bertscore_f1", 1.0), "rouge1_gain": ("rouge1_gain", 1.0),
               "true_win_rate": ("true_win", 100.0), "bon_gain": ("bon_gain", 1.0),
               "judge_win_rate": ("judge_score", 100.0), "judge_user_win_rate": ("judge_user_score", 100.0),
               "judge_rouge_agreement": ("judge_rouge_agree", 100.0),
               "judge_position_bias": ("judge_position_bias", 100.0), "judge_invalid": ("judge_invalid", 100.0),
               "rm_score": ("rm_score", 1.0)}
# the range of each metric (an interval never leaves it); every other metric lies in [0, 100]
BOUNDS = {"bertscore_f1": (-100.0, 100.0), "rouge1_gain": difference_bounds(PERCENT),
          "bon_gain": difference_bounds(PERCENT), "rm_score": (-np.inf, np.inf)}
SWITCHED_OFF = " (λ = 0: greedy)"


def per_user_means(rows: list[dict], column: str) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get(column) is not None:
            values[row["user"]].append(float(row[column]))
    return {user: float(np.mean(v)) for user, v in values.items()}


def display_labels(cells: list[dict]) -> dict[tuple[str, str], str]:
    """(policy, stored decoder) -> the label reports show: an ARGS deployment whose chosen λ is 0 in every
    seed is greedy decoding and says so; where only some seeds chose 0, the label counts them."""
    lambdas: dict[tuple[str, str], list] = defaultdict(list)
    for m in cells:
        lambdas[(m["policy"], m["decoder"])].append((m.get("settings") or {}).get("lambda"))
    labels = {}
    for (policy, decoder), values in lambdas.items():
        zeros = sum(v == 0 for v in values if v is not None)
        suffix = SWITCHED_OFF if zeros and zeros == len(values) else (
            f" (λ = 0 in {zeros} of {len(values)} seeds)" if zeros else "")
        labels[(policy, decoder)] = decoder + suffix
    return labels


@dataclass
class MethodResult:
    label: str  # as reports show it (display_labels)
    policy: str
    properties: dict  # the deployment's declared properties (decoders/base.py DeploymentProperties)
    index: int
    seeds: int
    user_means: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> {user: value}
    switched_off: bool = False  # ARGS with λ = 0 in every seed: greedy decoding, the reward unused
    decoder: str = ""  # the stored cells' name (the label may add "λ = 0: greedy")
    seed_numbers: tuple = ()
    settings: list = field(default_factory=list)  # each seed's cell settings (the RL leg's counted work)

    @property
    def decodes_with_learnt_part(self) -> bool:
        """A reward method deployed by decoding (ARGS, soft prompt): the selection-crisis methods."""
        return bool(self.properties.get("learns_from_pairs")) and not (
            self.properties.get("reranks_samples") or self.properties.get("tunes_policy"))  # their own legs

    @property
    def reranks_samples(self) -> bool:
        return bool(self.properties.get("reranks_samples"))

    @property
    def uses_demonstrations(self) -> bool:
        return bool(self.properties.get("uses_demonstrations"))

    def mean(self, metric: str) -> float:
        values = self.user_means.get(metric)
        return float(np.mean(list(values.values()))) if values else float("nan")


def _rows_with_gain(rows: list[dict], zero_shot: dict[str, float]) -> list[dict]:
    """Add the ground-truth gain over zero-shot on the same prompt (ROUGE-1 points, and a strict win)."""
    out = []
    for row in rows:
        row = dict(row)
        if row.get("rouge1") is not None and row["id"] in zero_shot:
            row["rouge1_gain"] = row["rouge1"] - zero_shot[row["id"]]
            row["true_win"] = float(row["rouge1"] > zero_shot[row["id"]])
        steps = sorted(int(k.split("@")[1]) for k in row if k.startswith("rouge1@"))
        if steps:  # Best-of-N: ROUGE-1 gained from N = 1 to N_max
            row["bon_gain"] = row[f"rouge1@{steps[-1]}"] - row[f"rouge1@{steps[0]}"]
        out.append(row)
    return out


def load_results(run_dir: str | Path) -> dict[str, list[MethodResult]]:
    """Per policy model, every method / baseline with its seed-averaged per-user metric values."""
    store = RunStore(run_dir)
    metrics = store.all_metrics()
    labels = display_labels(metrics)
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for m in metrics:
        grouped[(m["policy"], m["decoder"])].append(m)
    zero_shot: dict[str, dict[str, float]] = defaultdict(dict)
    for (policy, _), cells in grouped.items():
        for m in cells:
            if properties_of(m).get("reference_baseline"):
                for row in store.read_rows(Cell(policy, m["decoder"], m["seed"])):
                    if row.get("rouge1") is not None:
                        zero_shot[policy][row["id"]] = row["rouge1"]
    results: dict[str, list[MethodResult]] = defaultdict(list)
    for (policy, label), cells in grouped.items():
        shown = labels[(policy, label)]
        result = MethodResult(shown, policy, properties_of(cells[0]), cells[0].get("decoder_index", 0), len(cells),
                              switched_off=shown.endswith(SWITCHED_OFF), decoder=label,
                              seed_numbers=tuple(sorted(m["seed"] for m in cells)),
                              settings=[m.get("settings") or {} for m in cells])
        per_seed: dict[str, list[dict[str, float]]] = defaultdict(list)
        for m in cells:
            rows = _rows_with_gain(store.read_rows(Cell(policy, label, m["seed"])), zero_shot[policy])
            for metric, (column, scale) in ROW_COLUMNS.items():
                if rows and any(column in r for r in rows):
                    per_seed[metric].append({u: scale * v for u, v in per_user_means(rows, column).items()})
        for metric, seeds in per_seed.items():
            users = sorted(set.intersection(*(set(s) for s in seeds)))
            result.user_means[metric] = {u: float(np.mean([s[u] for s in seeds])) for u in users}
        results[policy].append(result)
    for policy in results:
        results[policy].sort(key=lambda r: (r.index, r.label))
    return dict(results)


def correlation_table(methods: list[MethodResult], x: str, y: str) -> dict:
    """{statistic: {"point", "low", "high", "reason", ...}} across the methods that have both metrics,
    each method's value its mean over the users both metrics share."""
    usable = [m for m in methods if m.user_means.get(x) and m.user_means.get(y)]
    if len(usable) < 1:
        return {s: None for s in STATISTICS}
    users = sorted(set.intersection(*(set(m.user_means[x]) & set(m.user_means[y]) for m in usable)))
    mean_of = lambda m, metric: float(np.mean([m.user_means[metric][u] for u in users])) if users else np.nan  # noqa: E731
    xs, ys = [mean_of(m, x) for m in usable], [mean_of(m, y) for m in usable]
    x_rows = np.array([[m.user_means[x][u] for u in users] for m in usable]).reshape(len(usable), len(users))
    y_rows = np.array([[m.user_means[y][u] for u in users] for m in usable]).reshape(len(usable), len(users))
    true = true_correlation(x_rows, y_rows, "pearson")  # the true means' ρ, noise counted: one for every statistic
    table = {}
    for statistic in STATISTICS:
        point = correlate(xs, ys, statistic)
        table[statistic] = {"point": point, **correlation_interval(statistic, point.value, point.n),
                            "methods": len(usable), "users": len(users), "level": 0.95,
                            "true": on_scale(true, statistic)}
    return table


def best_minus_best(icl: list[MethodResult], reward: list[MethodResult], metric: str, seed: int,
                    level: float = 0.95) -> dict | None:
    """Best ICL variant − best reward method on `metric`, the "best" of each chosen by ROUGE-1, cross-fitted.

    The winners are chosen on one half of the users and measured on the other, then the halves swap
    (analysis/paired.py), so no user's difference is measured with winners chosen on that user.
    `chosen` names the winners of each half. Users are those every candidate has.
    """
    if not icl or not reward:
        return None
    candidates = icl + reward
    users = sorted(set.intersection(*(set(m.user_means.get(metric, {})) & set(m.user_means.get("rouge1", {}))
                                      for m in candidates)))
    if not users:
        return None
    select = np.array([[m.user_means["rouge1"][u] for u in users] for m in candidates])  # (methods, users)
    value = np.array([[m.user_means[metric][u] for u in users] for m in candidates])
    result = crossfit_comparison(select, value, np.array([m in icl for m in candidates]), seed, level,
                                 bounds=difference_bounds(BOUNDS.get(metric, PERCENT)))
    if result is not None:
        result["chosen"] = [(candidates[i].label, candidates[r].label, share) for i, r, share in result["chosen"]]
    return result


@dataclass
class PolicyAnalysis:
    policy: str
    methods: list[MethodResult]
    rm_vs_policy: dict
    vs_rouge: dict[str, dict]  # metric -> correlation table with ROUGE-1 (Table 6)
    win_vs_gain: dict
    best_icl: MethodResult | None
    best_reward: MethodResult | None
    icl_minus_reward: dict[str, dict | None]
    cis: dict[str, dict[str, dict]]  # label -> metric -> mean_interval
    bon_quality: dict = field(default_factory=dict)  # Best-of-N: RM accuracy vs ROUGE-1 at N_max
    bon_gain: dict = field(default_factory=dict)  # Best-of-N: RM accuracy vs ROUGE-1 gain from N=1 to N_max
    switched_off: list[MethodResult] = field(default_factory=list)  # reward methods that chose λ = 0
    bon_judged: dict = field(default_factory=dict)  # Best-of-N: RM accuracy vs the judged win rate at N_max
    bon_rm_score: dict = field(default_factory=dict)  # Best-of-N: RM accuracy vs its own score at N_max (circular)
    rl_quality: dict = field(default_factory=dict)  # the RL leg: RM accuracy vs {ROUGE-1, judged win rate}


def analyse_policy(policy: str, methods: list[MethodResult], seed: int = 0) -> PolicyAnalysis:
    reward = [m for m in methods if m.decodes_with_learnt_part]
    icl = [m for m in methods if m.uses_demonstrations]
    vs_rouge = {x: correlation_table(reward, x, "rouge1") for x in ("rm_accuracy", "policy_accuracy", "win_rate")}
    icl = [m for m in icl if m.user_means.get("rouge1")]
    steering = [m for m in reward if m.user_means.get("rouge1") and not m.switched_off]
    by_rouge = lambda group: max(group, key=lambda m: m.mean("rouge1")) if group else None  # noqa: E731
    best_icl, best_reward = by_rouge(icl), by_rouge(steering)
    differences = {metric: best_minus_best(icl, steering, metric, seed) for metric, _ in GENERATION_METRICS}
    cis = {m.label: {metric: mean_interval(list(values.values()), BOUNDS.get(metric, PERCENT))
                     for metric, values in m.user_means.items() if values} for m in methods}
    bon = [m for m in methods if m.reranks_samples]
    rl = [m for m in methods if m.properties.get("tunes_policy")]
    return PolicyAnalysis(policy, methods, correlation_table(reward, "rm_accuracy", "policy_accuracy"),
                          vs_rouge, correlation_table(reward, "win_rate", "rouge1_gain"),
                          best_icl, best_reward, differences, cis,
                          correlation_table(bon, "rm_accuracy", "rouge1") if bon else {},
                          correlation_table(bon, "rm_accuracy", "bon_gain") if bon else {},
                          [m for m in reward if m.switched_off],
                          correlation_table(bon, "rm_accuracy", "judge_win_rate") if bon else {},
                          correlation_table(bon, "rm_accuracy", "rm_score") if bon else {},
                          {y: correlation_table(rl, "rm_accuracy", y) for y in ("rouge1", "judge_win_rate")}
                          if rl else {})


def analyse(run_dir: str | Path, seed: int = 0) -> list[PolicyAnalysis]:
    return [analyse_policy(policy, methods, seed) for policy, methods in load_results(run_dir).items()]

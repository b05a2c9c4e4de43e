"""Paper-style tables from stored results only (Table 9 layout: mean ± std over seeds).

    persalign report runs/demo/demo   # after make demo
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from persalign.analysis.study import analyse, display_labels
from persalign.core.files import escape_controls, write_atomic
from persalign.decoders.base import properties_of
from persalign.report.closing import sample_generations, what_next
from persalign.report.downstream import downstream_sections
from persalign.report.results import write_results
from persalign.report.study_sections import study_sections
from persalign.report.verdict import verdict_section
from persalign.runner.store import RunStore

# (metric key in metrics.json, column title)
TABLE9_COLUMNS = [
    ("rm_accuracy", "RM Acc"),
    ("policy_accuracy", "Policy Acc"),
    ("rouge1", "ROUGE-1"),
    ("rougeL", "ROUGE-L"),
    ("bertscore_f1", "BERTScore-F1"),
    ("win_rate", "Win Rate"),
]


def mean_std(values: list[float]) -> str:
    """Mean ± standard deviation over seeds; one seed has no spread to show, so just its value."""
    clean = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not clean:
        return "-"
    return f"{clean[0]:.2f}" if len(clean) == 1 else f"{np.mean(clean):.2f} ± {np.std(clean):.2f}"


def results_frame(store: RunStore) -> pd.DataFrame:
    """One row per stored cell; `decoder` is the label reports show (analysis.study.display_labels)."""
    records = store.all_metrics()
    if not records:
        return pd.DataFrame()
    labels = display_labels(records)
    return pd.DataFrame(records).assign(properties=[properties_of(r) for r in records],
                                        stored_decoder=[r["decoder"] for r in records],
                                        decoder=[labels[(r["policy"], r["decoder"])] for r in records])


def metric_settings(frame: pd.DataFrame) -> dict:
    """The generation metrics' settings recorded by the cells (the first cell that has them)."""
    for settings in frame.get("settings", []):
        if isinstance(settings, dict) and "rouge_stemmer" in settings:
            return settings
    return {}


def bertscore_title(frame: pd.DataFrame) -> str:
    settings = metric_settings(frame)
    if "bertscore_model" not in settings:
        return "BERTScore-F1"
    return f"BERTScore-F1 ({settings['bertscore_model']}, layer {settings['bertscore_layer']})"


def metrics_line(frame: pd.DataFrame) -> str:
    """Which ROUGE and BERTScore these are, for the report header (comparable with the field or not)."""
    settings = metric_settings(frame)
    if not settings:
        return "Generation metrics: none recorded."
    stem = "Porter stemming" if settings.get("rouge_stemmer") else "no stemming (LaMP / HF evaluate default)"
    line = f"ROUGE: rouge-score F1, {stem}."
    if "bertscore_model" in settings:
        line += (f" BERTScore-F1: encoder `{settings['bertscore_model']}`, layer {settings['bertscore_layer']}, "
                 f"{'baseline-rescaled' if settings.get('rescaled') else 'no baseline rescaling'}.")
    return line


DRAW_WORDS = {"per_user": "one random set per user and seed, the same for all of the user's queries (the paper's "
                           "demonstration set of Eq. 7; its prompt block prefilled once per user)",
              "per_query": "drawn anew for every query",
              "retrieved": "the most similar to each query, retrieved per query"}


def demonstrations_line(frame: pd.DataFrame) -> str | None:
    """How each ICL row's demonstrations were drawn, from the cells' stored settings (None: no ICL cells)."""
    draws: dict[str, list[str]] = {}
    for label, settings in zip(frame["decoder"], frame["settings"]):
        draw = settings.get("draw") if isinstance(settings, dict) else None
        if draw and label not in draws.get(draw, []):
            draws.setdefault(draw, []).append(label)
    if not draws:
        return None
    return "Demonstrations: " + "; ".join(f"{', '.join(labels)}: {DRAW_WORDS.get(draw, draw)}"
                                          for draw, labels in draws.items()) + "."


def _clipped_shots(rows: pd.DataFrame) -> str:
    """' (3.2 demos used on average)' where a user's support set held fewer items than `shots` or demos
    were dropped to fit the prompt budget (then also how many prompts were cut)."""
    if "demos_used_mean" not in rows or rows["demos_used_mean"].isna().all():
        return ""
    shots = [s.get("shots") for s in rows["settings"] if isinstance(s, dict)]
    used = float(rows["demos_used_mean"].mean())
    cut = int(rows["prompts_cut"].fillna(0).sum()) if "prompts_cut" in rows else 0
    why = f"; {cut} prompts cut to fit generation.max_prompt_tokens" if cut else ""
    return f" ({used:.1f} demos used on average{why})" if shots and shots[0] and used < shots[0] - 1e-9 else ""


def cut_prompts_lines(frame: pd.DataFrame) -> list[str]:
    """Where query inputs had to be cut to fit the prompt budget, per deployment (before the verdict: what it
    compares is then not the whole input)."""
    if "prompts_cut" not in frame or not frame["prompts_cut"].fillna(0).any():
        return []
    cut = frame.groupby("decoder", sort=False)[["prompts_cut", "examples"]].sum()
    listed = ", ".join(f"{label} {int(row.prompts_cut)} of {int(row.examples)}" for label, row in cut.iterrows()
                       if row.prompts_cut)
    return ["", f"**Prompts cut to fit** `generation.max_prompt_tokens` (or the model's context): {listed}. "
                "Those outputs answer a shortened input."]


def table9(frame: pd.DataFrame, policy: str, row_order: list[str]) -> str:
    """One Markdown table for one policy model: a row per method, mean ± std over seeds."""
    sub = frame[frame["policy"] == policy]
    titles = {**dict(TABLE9_COLUMNS), "bertscore_f1": bertscore_title(frame)}
    columns = [(key, titles[key]) for key, _ in TABLE9_COLUMNS if key in sub.columns and sub[key].notna().any()]
    header = "| Method | " + " | ".join(title for _, title in columns) + " | Seeds |"
    lines = [header, "|" + "---|" * (len(columns) + 2)]
    labels = [label for label in row_order if label in set(sub["decoder"])]
    labels += sorted(set(sub["decoder"]) - set(labels))
    for label in labels:
        rows = sub[sub["decoder"] == label]
        seeded = bool(rows["seed_dependent"].iloc[0])  # a seed-free row repeats one value: no spread to show
        cells = [mean_std(rows[key].tolist() if seeded else rows[key].tolist()[:1]) for key, _ in columns]
        seeds = len(rows) if seeded else f"{len(rows)} (seed-free)"
        lines.append(f"| {label}{_clipped_shots(rows)} | " + " | ".join(cells) + f" | {seeds} |")
    return "\n".join(lines)


TRAINING_STAGES = [("features", "features_s"), ("training", "fit_s"), ("adaptation", "adapt_s")]


def _stage_names(frame: pd.DataFrame) -> list[str]:
    """Column names of the cost table: the cells' timed stages, then training's, then λ choice."""
    timed = sorted({k.removesuffix("_s") for d in frame["stage_seconds"] for k in d})
    return timed + [name for name, _ in TRAINING_STAGES] + ["λ choice"]


def distinct_trainings(settings: list, seeds: list) -> list[dict]:
    """The training records of the given cells, each trained model once: a method deployed with ARGS and
    with Best-of-N is trained once and both cells carry the same record (measured seconds make it unique)."""
    seen: dict[str, dict] = {}
    for record, seed in zip(settings, seeds):
        training = record.get("training") if isinstance(record, dict) else None
        if isinstance(training, dict):
            seen.setdefault(json.dumps([seed, training], sort_keys=True, default=str), training)
    return list(seen.values())


def _stage_seconds(rows: pd.DataFrame, names: list[str]) -> list[float]:
    """Seconds per stage (in `names` order) summed over the given cells' timing records; shared training,
    adaptation and features counted once."""
    settings = [r if isinstance(r, dict) else {} for r in rows["settings"]]
    training = distinct_trainings(settings, list(rows["seed"]))
    keys = dict(TRAINING_STAGES)
    values = []
    for name in names:
        if name in keys:
            values.append(sum(t.get(keys[name], 0.0) or 0.0 for t in training))
        elif name == "λ choice":
            values.append(sum(r.get("lambda_s", 0.0) for r in settings))
        else:
            values.append(sum(d.get(f"{name}_s", 0.0) for d in rows["stage_seconds"]))
    return values


def stage_totals(frame: pd.DataFrame) -> dict[str, float]:
    """Seconds per stage summed over every cell of a run (the cost table's total row)."""
    names = _stage_names(frame)
    return dict(zip(names, _stage_seconds(frame, names)))


def cost_table(frame: pd.DataFrame) -> str:
    """Seconds per stage, summed over seeds, from the cells' own timing records, with a total row."""
    names = _stage_names(frame)
    lines = ["| Policy | Method | " + " | ".join(names) + " | λ | training cap |", "|" + "---|" * (len(names) + 4)]
    for (policy, label), rows in frame.groupby(["policy", "decoder"], sort=False):
        settings = [r if isinstance(r, dict) else {} for r in rows["settings"]]
        training = [r.get("training", {}) for r in settings]
        values = _stage_seconds(rows, names)
        lams = sorted({r.get("lambda") for r in settings if r.get("lambda") is not None})
        caps = sorted({t.get("settings", {}).get("max_steps") for t in training} - {None})
        lines.append(f"| {policy} | {label} | " + " | ".join(f"{v:.0f}" for v in values)
                     + f" | {', '.join(f'{x:g}' for x in lams) or '-'} | "
                     + (f"{caps[0]} steps" if caps else "-") + " |")
    totals = _stage_seconds(frame, names)
    lines.append(f"| all | total ({sum(totals) / 60:.1f} min) | " + " | ".join(f"{v:.0f}" for v in totals) + " | | |")
    return "\n".join(lines) + ("\n\nA method deployed more than once (ARGS and Best-of-N) is trained once: its row "
                               "shows its training, the total counts it once.")


def method_settings(frame: pd.DataFrame) -> list[str]:
    """Each trained method's settings as it was trained (from its cells' training record, seed left out)."""
    seen: dict[str, dict] = {}
    for label, settings in zip(frame["decoder"], frame["settings"]):
        training = settings.get("training") if isinstance(settings, dict) else None
        values = training.get("settings") if isinstance(training, dict) else None
        if isinstance(values, dict):
            seen.setdefault(label, {k: v for k, v in values.items() if k != "seed"})
    if not seen:
        return []
    lines = ["", "## Method settings (as trained; `persalign list --method NAME` explains each)", "",
             "| Method | settings |", "|---|---|"]
    return lines + [f"| {label} | " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                for k, v in values.items()) + " |" for label, values in seen.items()]


def bon_curves(frame: pd.DataFrame) -> dict[str, dict[str, dict]]:
    """policy -> Best-of-N label -> metric -> {N: mean over seeds}, from the cells' stored curves."""
    out: dict[str, dict[str, dict]] = {}
    for (policy, label), rows in frame.groupby(["policy", "decoder"], sort=False):
        curves = [s.get("curves") for s in rows["settings"] if isinstance(s, dict) and s.get("curves")]
        if curves:
            out.setdefault(policy, {})[label] = {
                metric: {str(n): float(np.nanmean([c[metric][n] for c in curves if n in c.get(metric, {})]))
                         for n in curves[0].get(metric, {})} for metric in curves[0]}
    return out


def build_report(run_dir: str | Path, analyses: list | None = None) -> str:
    """report.md from stored results; `analyses` (analysis.study.analyse) when the caller already has them."""
    store = RunStore(run_dir)
    store.check_is_run()
    frame = results_frame(store)
    problems = getattr(store, "problems", [])
    if frame.empty:
        return f"No completed cells in {run_dir} yet." + "".join(f"\n- {p}" for p in problems)
    from persalign.report.completeness import absent_cells, finished_keys, partial_run_lines
    config = store.config()
    order = list(dict.fromkeys(frame.sort_values(["decoder_index", "decoder"])["decoder"]))
    parts = [f"# persalign report: {config.get('name', '')}", "",
             f"Data set: `{config['data']['dataset']}`; examples per cell: "
             f"{int(frame['examples'].max())} query items of {int(frame['users'].max())} adaptation users. "
             "Policy accuracy: strict s(chosen) > s(rejected) (ties: see rows.jsonl); "
             "scores are means over users of per-user means (×100).", "", metrics_line(frame)]
    demonstrations = demonstrations_line(frame)
    parts += ["", demonstrations] if demonstrations else []
    analyses = analyse(run_dir) if analyses is None else analyses
    absent = absent_cells(store, finished_keys(frame))
    parts += partial_run_lines(absent, len(problems)) + cut_prompts_lines(frame)
    parts += verdict_section(store, frame, analyses)
    for policy in dict.fromkeys(frame["policy"]):
        parts += ["", f"## Policy: {policy}", "", table9(frame, policy, order)]
    parts += study_sections(analyses, bon_curves(frame)) + downstream_sections(analyses)
    parts += ["", "## Cost (seconds, summed over seeds) and chosen λ", "", cost_table(frame)]
    parts += method_settings(frame)
    parts += sample_generations(store, frame, order)
    cut = [(label, s["truncation_ties"]) for label, s in zip(frame["decoder"], frame["settings"])
           if isinstance(s, dict) and s.get("truncation_ties")]
    if cut:
        parts += ["", "Warning: ARGS steps at which every candidate got the same reward because the reward model "
                  "cut its input (hf_rm max_length; ARGS was greedy there): "
                  + ", ".join(f"{label} {n}" for label, n in cut)]
    ties = frame.groupby("decoder")["policy_ties"].mean()
    if (ties > 0).any():
        parts += ["", "Policy-accuracy ties (%): " + ", ".join(f"{k} {v:.2f}" for k, v in ties.items() if v > 0)]
    if problems:
        parts += ["", "## Damaged cells (not in any table above)", ""] + [f"- {p}" for p in problems]
    parts += what_next(run_dir, frame)
    text = escape_controls("\n".join(parts) + "\n")  # text from data: no terminal escape reaches the page
    write_atomic(Path(run_dir) / "report.md", text)
    write_results(run_dir, analyses)
    return text

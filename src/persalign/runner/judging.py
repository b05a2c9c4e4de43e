"""The judge's step of a cell (issue #41): each generation against the zero-shot output and against the
user's own text, by a pairwise LLM judge that knows the user (metrics/judge.py).

What the judge knows of the user: the rubric where the data has one (Personalized RewardBench's
`rubric_aspects`, never shown to a reward model), else the user's earlier texts (their support items, the
ones ICL may show). Each pair is asked in both orders; several judges vote by majority. Per row:

- `judge` / `judge_score`: the deployment's output against zero-shot's on the same prompt (win 1, tie 0.5,
  loss 0; None where the answers could not be parsed), `judge_position_bias` the share of judges that
  named one position in both orders, `judge_invalid` 1 where no majority answer could be parsed; Best-of-N
  rows carry `judge_score@N` for each N's pick;
- `judge_user_score`: against the user's own text, where the data has one;
- `judge_rouge_agree`: 1 where the judge's preference between the two outputs is ROUGE-1's against the
  user's text, 0 where it is the other (ties of either left out): what the judge is worth at this size;
- `judge_flops`: the judging's counted work (prefill and answer of every prompt; endpoint judges: none).

    persalign run demo judge.models=[smollm2-135m-instruct] split.max_query_per_user=2
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from persalign.engine.cost import greedy_work, shape_of
from persalign.metrics.judge import LMJudge, endpoint_judge, judge_pairs, majority

SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


@dataclass
class Judges:
    config: object  # JudgeConfig
    generators: list  # one per judge model: prompts -> answers

    def settings(self) -> dict:
        return {"judge_models": list(self.config.models), "judge_endpoint": self.config.endpoint,
                "judge_context_items": self.config.context_items}


def load_judges(config, device: str, dtype: str, cache_dir) -> Judges | None:
    """The configured judges (None: judging is off)."""
    judge = config.judge
    if not judge.models:
        return None
    if judge.endpoint:
        return Judges(judge, [endpoint_judge(judge.endpoint, m, max_tokens=judge.max_new_tokens,
                                             timeout_s=judge.timeout_s, retries=judge.retries) for m in judge.models])
    return Judges(judge, [LMJudge(_judge_model(m, device, dtype, cache_dir), judge.max_new_tokens)
                          for m in judge.models])


def _judge_model(name: str, device: str, dtype: str, cache_dir):
    from persalign.core.errors import ModelLoadError
    from persalign.models.loading import load_causal_lm

    try:
        return load_causal_lm(name, device, dtype, cache_dir)
    except ModelLoadError as error:
        raise ModelLoadError(f"judge.models: {error}") from None


def user_context(run, row: dict) -> str:
    """What the judge is told of the row's user: the rubric, else up to `context_items` earlier texts."""
    rubric = run.dataset.rubrics.get(row["id"])
    if rubric:
        return f"The user's rubric:\n{rubric}"
    config = run.config.judge
    pool = [item for item in run.eval_context.demo_pool(row["user"]) if item.id != row["id"]]
    texts = [item.output[: config.context_chars] for item in pool[: config.context_items]]
    return "Texts this user wrote before:\n" + "\n".join(f"{i + 1}. {t}" for i, t in enumerate(texts)) if texts \
        else "Nothing is known of this user."


def vote(judges: Judges, contexts, queries, candidates, references) -> tuple[list, list[float], list[float]]:
    """(majority outcome, share of judges position-biased, counted FLOPs) per item."""
    tallies, flops = [], [0.0] * len(candidates)
    for generate in judges.generators:
        tallies.append(judge_pairs(generate, contexts, queries, candidates, references))
        if isinstance(generate, LMJudge):
            shape, n = shape_of(generate.lm.model), len(candidates)
            for i in range(n):
                for prompt, answer in (generate.tokens[i], generate.tokens[n + i]):
                    flops[i] += greedy_work(shape, prompt, answer, generate.max_new_tokens).flops
    biased = [sum(t.biased[i] for t in tallies) / len(tallies) for i in range(len(candidates))]
    return majority(tallies), biased, flops


def judge_finished_cell(deployment, ctx, rows: list[dict]) -> tuple[list[dict], dict]:
    """Judge every row not judged yet (a resumed cell keeps its judged rows); the stage's seconds and FLOPs."""
    run, timings = ctx.run, {"batch": "judge"}
    todo = [r for r in rows if r.get("generation") is not None and "judge_flops" not in r]
    if not todo:
        return rows, timings
    for generate in run.judges.generators:
        if isinstance(generate, LMJudge):
            ctx.policy.meter.watch(generate.lm.model)
    started = time.perf_counter()
    with ctx.policy.meter.measure(timings, "judge_flops"):  # metered, beside each row's counted judge_flops
        judge_rows(deployment, ctx, todo)
    timings["judge_s"] = time.perf_counter() - started
    return rows, timings


def judge_rows(deployment, ctx, rows: list[dict]) -> None:
    run = ctx.run
    contexts, queries = [user_context(run, r) for r in rows], [r["prompt"] for r in rows]
    flops = [0.0] * len(rows)
    if not deployment.properties.reference_baseline:
        zero_shot = ctx.policy.zero_shot_outputs()
        baseline = [zero_shot[r["id"]] for r in rows]
        outcomes, biased, spent = vote(run.judges, contexts, queries, [r["generation"] for r in rows], baseline)
        flops = [a + b for a, b in zip(flops, spent)]
        for row, outcome, bias in zip(rows, outcomes, biased):
            row.update(judge=outcome, judge_score=SCORE.get(outcome), judge_position_bias=bias,
                       judge_invalid=float(outcome is None))
        flops = [a + b for a, b in zip(flops, judge_best_of_n(run, rows, contexts, queries, baseline))]
        agree_with_rouge(run, rows, baseline)
    with_text = [i for i, r in enumerate(rows) if r.get("reference")]
    if with_text:
        outcomes, _, spent = vote(run.judges, [contexts[i] for i in with_text], [queries[i] for i in with_text],
                                  [rows[i]["generation"] for i in with_text], [rows[i]["reference"] for i in with_text])
        for i, outcome, f in zip(with_text, outcomes, spent):
            rows[i]["judge_user_score"] = SCORE.get(outcome)
            flops[i] += f
    for row, f in zip(rows, flops):
        row["judge_flops"] = f


def judge_best_of_n(run, rows: list[dict], contexts, queries, baseline) -> list[float]:
    """Best-of-N rows: each N's pick against zero-shot (`judge_score@N`); a pick already judged (N_max's is the
    row's own generation) is not asked again."""
    flops = [0.0] * len(rows)
    known = {(r["id"], r["generation"]): r["judge"] for r in rows}
    for size in sorted(int(k.split("@")[1]) for k in rows[0] if k.startswith("generation@")):
        todo = [i for i, r in enumerate(rows) if (r["id"], r[f"generation@{size}"]) not in known]
        if todo:
            outcomes, _, spent = vote(run.judges, [contexts[i] for i in todo], [queries[i] for i in todo],
                                      [rows[i][f"generation@{size}"] for i in todo], [baseline[i] for i in todo])
            for i, outcome, f in zip(todo, outcomes, spent):
                known[(rows[i]["id"], rows[i][f"generation@{size}"])] = outcome
                flops[i] += f
        for row in rows:
            row[f"judge_score@{size}"] = SCORE.get(known[(row["id"], row[f"generation@{size}"])])
    return flops


def agree_with_rouge(run, rows: list[dict], baseline: list[str]) -> None:
    """`judge_rouge_agree` where ROUGE-1 against the user's text and the judge both prefer one output."""
    with_text = [i for i, r in enumerate(rows) if r.get("reference") and r.get("rouge1") is not None]
    if not with_text:
        return
    zero = run.rouge.score([baseline[i] for i in with_text], [rows[i]["reference"] for i in with_text])
    for i, score in zip(with_text, zero):
        row, gap = rows[i], rows[i]["rouge1"] - score["rouge1"]
        if gap and row.get("judge") in ("win", "loss"):
            row["judge_rouge_agree"] = float((gap > 0) == (row["judge"] == "win"))

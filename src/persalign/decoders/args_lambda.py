"""Choosing the ARGS weight λ (paper appendix F.2).

Reward models trained the same way can converge to rewards of very different
magnitudes, so λ is chosen per trained model:

- `policy_accuracy` (TL;DR, PRISM): maximise policy accuracy of
  s_RGD(y|x) = Σ_t log π(y_t|x,y<t) + λ Σ_t r(y_t|x,y<t)   (Eq. 5-6)
  on the train users' held-out pairs. Vectorised over the whole grid at once.
- `harmonic` (Pref-LaMP-style data with user completions): maximise the
  harmonic mean of ROUGE-1, inverse perplexity (coherence) and policy
  accuracy on a validation set of held-out train-user items, generating with
  ARGS at each λ.

Ties go to the smallest λ (the least reward-driven choice). The chosen λ,
the rule and the whole curve are kept in the cell folder as lambda.json.

    persalign run demo methods='[{name: lore}]' args.selection=harmonic args.validation_size=8
"""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from persalign.decoders.args_decoding import RewardGuide, args_decode_reusing_greedy
from persalign.decoders.args_graph import GraphedArgs, args_decode_graphed_where_possible
from persalign.engine.batching import plan_generation
from persalign.engine.decoding import clean_generation
from persalign.metrics.ranking import outcomes
from persalign.rewards.policy_scoring import logprob_sums, reward_sums, s_rgd
from persalign.rewards.train import PairData, pair_data


def policy_accuracy_curve(lp_chosen, lp_rejected, r_chosen, r_rejected, lambdas) -> np.ndarray:
    """Strict policy accuracy (×100) of s_RGD for every λ in the grid (one row per λ)."""
    lam = np.asarray(lambdas, dtype=float)[:, None]
    s_w = s_rgd(np.asarray(lp_chosen)[None], np.asarray(r_chosen)[None], lam)
    s_l = s_rgd(np.asarray(lp_rejected)[None], np.asarray(r_rejected)[None], lam)
    return 100 * outcomes(s_w, s_l)[0].mean(axis=1)


def harmonic_mean(values) -> float:
    values = np.clip(np.asarray(values, dtype=float), 1e-9, None)
    return float(len(values) / np.sum(1.0 / values))


def best_lambda(lambdas, objective) -> tuple[float, int]:
    """(λ, index) maximising `objective`; the first (smallest-λ-in-order) wins ties."""
    order = np.argsort(lambdas, kind="stable")
    values = np.asarray(objective)[order]
    index = int(order[int(np.argmax(values))])
    return float(lambdas[index]), index


def validation_pairs(dataset, split, formatter, size: int | None) -> tuple[PairData, list[str]]:
    """The train users' held-out pairs (every `step`-th when `size` is set) and their ids, in the same order."""
    val = pair_data(dataset, split.heldout, formatter, split.train_users)
    ids = [i for user in split.train_users for i in split.heldout.get(user, [])]
    if size:
        step = max(1, len(val) // size)
        keep = list(range(0, len(val), step))[:size]
        val, ids = val.subset(keep), [ids[i] for i in keep]
    return val, ids


def rule_of(run) -> str:
    """The λ rule a run applies: `auto` is the harmonic rule where the data has the users' own outputs."""
    rule = run.config.args.selection
    if rule == "auto":
        return "harmonic" if run.has_references else "policy_accuracy"
    return rule


def choose_lambda(ctx, trained, decoded: dict | None = None) -> dict:
    """Appendix F.2 for one trained reward model and one policy: {'lambda', 'rule', 'curve'}. `decoded`: the
    validation outputs at the nonzero λ values, decoded already (by the shared pass, runner/args_pass.py)."""
    run, policy = ctx.run, ctx.policy
    args_config, generation = run.config.args, run.config.generation
    batch_size = generation.batch_size
    grid, rule = list(args_config.lambdas), rule_of(run)
    if rule == "fixed":
        return {"lambda": args_config.fixed_lambda, "rule": "fixed", "curve": {}}
    val, val_ids = validation_pairs(run.dataset, run.split, policy.formatter,
                                    args_config.validation_size if rule == "harmonic" else None)
    lp_w = logprob_sums(policy.lm, val.prompts, val.chosen, batch_size, policy.memo, generation.token_budget)
    lp_l = logprob_sums(policy.lm, val.prompts, val.rejected, batch_size, policy.memo, generation.token_budget)
    _, r_w = reward_sums(trained.method, trained.backbone, val.users, val.prompts, val.chosen)
    _, r_l = reward_sums(trained.method, trained.backbone, val.users, val.prompts, val.rejected)
    accuracy = policy_accuracy_curve(lp_w, lp_l, r_w, r_l, grid)
    curve = {"lambda": grid, "policy_accuracy": accuracy.tolist()}
    if rule == "harmonic":
        completions = run.dataset.completion_by_id()
        references = [completions[i].reference for i in val_ids]  # each pair's own reference
        if decoded is None:
            decoded = decode_grid(ctx, trained, val)
        elif 0 in grid:  # the shared pass decodes the nonzero λ; greedy comes from the policy's memo
            decoded = {**decoded, 0.0: decode_greedy(ctx, trained, val)}
        curve.update(harmonic_curve(ctx, val, references, accuracy, decoded))
        lam, _ = best_lambda(grid, curve["harmonic"])
        needed = candidate_forwards(decoded, generation.max_new_tokens)
        return {"lambda": lam, "rule": rule, "curve": curve, "candidate_forwards": needed,
                "candidate_forwards_done": needed, "near_ties": 0}  # alone; the shared pass records its own
    lam, _ = best_lambda(grid, accuracy)
    return {"lambda": lam, "rule": rule, "curve": curve}


def candidate_forwards(decoded: dict, max_new_tokens: int) -> int:
    """ARGS candidate forwards of the grid's nonzero λ decodes (λ = 0 is greedy: none), one per step."""
    return sum(min(len(ids) + 1, max_new_tokens) for lam, rows in decoded.items() if lam != 0 for ids in rows)


def decode_greedy(ctx, trained, val: PairData) -> list[list[int]]:
    """The validation outputs at λ = 0 (greedy), decoded once per policy and scorer kind and reused by every
    method and seed (`args_decode_reusing_greedy`)."""
    config, policy = ctx.run.config, ctx.policy
    generation = config.generation
    out = [None] * len(val)
    for batch in plan_generation(val.prompts, generation, policy.lm.device):
        guide = RewardGuide(trained.backbone.lm, trained.method, [val.users[i] for i in batch], 0.0,
                            config.args.top_k, prefills=policy.prefills)
        decoded = args_decode_reusing_greedy(policy.decoded, policy.lm, guide, [val.prompts[i] for i in batch],
                                             generation.max_new_tokens)
        for i, ids in zip(batch, decoded):
            out[i] = ids
    return out


def decode_grid(ctx, trained, val: PairData) -> dict[float, list[list[int]]]:
    """ARGS outputs of every validation prompt at every λ of the grid.

    λ = 0 (greedy): `decode_greedy`. Every other λ is
    a row of one pass: a batch holds all λ values of its prompts (up to batch_size × λ values rows, within
    the token budget), each prompt prefilled once, so a step's fixed cost is paid once for the whole grid
    instead of once per λ.
    """
    config, policy = ctx.run.config, ctx.policy
    generation, grid = config.generation, list(dict.fromkeys(config.args.lambdas))
    out = {lam: [None] * len(val) for lam in grid}
    if 0 in out:
        out[0] = decode_greedy(ctx, trained, val)
    weights = [lam for lam in grid if lam != 0]
    items = [(i, lam) for i in range(len(val)) for lam in weights]  # a prompt's λ rows stay together
    plan = plan_generation([val.prompts[i] for i, _ in items], generation, policy.lm.device,
                           max_items=generation.batch_size * max(1, len(weights)))
    graphs = GraphedArgs(policy.meter) if config.args.cuda_graph else None  # captured steps kept across batches
    for batch in tqdm(plan, desc="choosing λ (ARGS on validation, the grid in one pass)", leave=False,
                      disable=None):
        rows = [items[b] for b in batch]
        guide = RewardGuide(trained.backbone.lm, trained.method, [val.users[i] for i, _ in rows],
                            [lam for _, lam in rows], config.args.top_k, prefills=policy.prefills)
        decoded = args_decode_graphed_where_possible(graphs, policy.lm, guide, [val.prompts[i] for i, _ in rows],
                                                     generation.max_new_tokens)
        for (i, lam), ids in zip(rows, decoded):
            out[lam][i] = ids
    return out


def inverse_perplexity(policy, prompts: list[list[int]], texts: list[str], generation) -> float:
    """Mean over items of exp(mean log π(y_t | x, y<t)). The sums come from the policy's log-prob memo: a text
    that every method and seed writes (greedy's at λ = 0, and theirs wherever the reward did not change it)
    is scored once per policy, not once per method × seed × λ (issue #42)."""
    responses = [policy.formatter.response_ids(t) for t in texts]
    sums = logprob_sums(policy.lm, prompts, responses, generation.batch_size, policy.memo, generation.token_budget)
    return float(np.mean([np.exp(s / len(r)) if len(r) else 0.0 for s, r in zip(sums, responses)]))


def harmonic_curve(ctx, val: PairData, references: list[str], accuracy, decoded: dict) -> dict:
    """ROUGE-1, inverse perplexity and their harmonic mean with accuracy of the validation outputs `decoded` at
    each λ."""
    config, policy = ctx.run.config, ctx.policy
    out = {"rouge1": [], "inverse_perplexity": [], "harmonic": []}
    for lam, acc in zip(config.args.lambdas, accuracy):
        texts = [clean_generation(policy.lm.tokenizer, ids) for ids in decoded[lam]]
        r1 = float(np.mean([s["rouge1"] for s in ctx.run.rouge.score(texts, references)]) / 100)
        inv_ppl = inverse_perplexity(policy, val.prompts, texts, config.generation)
        out["rouge1"].append(r1)
        out["inverse_perplexity"].append(inv_ppl)
        out["harmonic"].append(harmonic_mean([r1, inv_ppl, acc / 100]))
    return out

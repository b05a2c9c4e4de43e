"""One ARGS pass for many heads (issue #42): the same tokens as each head decoded alone, fewer candidate forwards.

    pytest tests/test_args_shared.py
"""

import pytest

from persalign.decoders.args_decoding import RewardGuide, args_decode
from persalign.decoders.args_shared import HeadRow, shared_args_decode
from tests.test_rewards_args import prompts_of, random_method

TEXTS = ["rain", "a long day at the council", "markets fall", "the mayor speaks on the new bridge"]
USERS = ["u0", "u1", "u2", "u3"]


def heads(lm, names=("global_rm", "lore", "global_rm_v2")) -> dict:
    """Several methods (last- and mean-pooled) and seeds: each a head of its own."""
    hidden = lm.model.config.hidden_size
    return {(name, seed): random_method(name, hidden, seed=seed) for name in names for seed in (0, 1)}


def alone(lm, method, prompts, lam, top_k, max_new) -> list[list[int]]:
    return args_decode(lm, RewardGuide(lm, method, USERS[: len(prompts)], lam, top_k), prompts, max_new)


def test_every_head_lambda_and_seed_decodes_as_it_does_alone(tiny_lm):
    """Rows of 6 heads × 3 λ over 4 prompts in one pass: each row's tokens are those of its head decoded alone
    at its λ (the batch a deployment decodes), except where the pass counted a near-tie."""
    prompts, top_k, max_new = prompts_of(tiny_lm, TEXTS), 4, 8
    rows, expected = [], []
    for method in heads(tiny_lm).values():
        for lam in (0.1, 1.0, 10.0):
            rows += [HeadRow(tuple(p), method, u, lam) for p, u in zip(prompts, USERS)]
            expected += alone(tiny_lm, method, prompts, lam, top_k, max_new)
    shared = shared_args_decode(tiny_lm, rows, max_new, top_k)
    differ = [i for i, (a, b) in enumerate(zip(shared.ids, expected)) if a != b]
    assert all(shared.near_ties[i] > 0 for i in differ), differ
    assert len(differ) <= len(rows) // 20
    assert shared.needed == [min(len(ids) + 1, max_new) for ids in shared.ids]  # a step per token and the end
    assert len({tuple(ids) for ids in expected}) > len(prompts)  # the heads and λ values do part


def test_rows_that_agree_share_their_candidate_forwards(tiny_lm):
    """At λ = 0 every head picks the policy's argmax: 6 heads on one prompt are one node, so the pass does 1/6
    of the forwards they need alone; at λ = 10 the heads part and the pass does more than that."""
    prompt, top_k, max_new = tuple(prompts_of(tiny_lm, TEXTS[:1])[0]), 4, 8
    methods = list(heads(tiny_lm).values())
    greedy = shared_args_decode(tiny_lm, [HeadRow(prompt, m, "u0", 0.0) for m in methods], max_new, top_k)
    assert len({tuple(ids) for ids in greedy.ids}) == 1
    assert sum(greedy.done) == pytest.approx(sum(greedy.needed) / len(methods))
    guided = shared_args_decode(tiny_lm, [HeadRow(prompt, m, "u0", 10.0) for m in methods], max_new, top_k)
    if len({tuple(ids) for ids in guided.ids}) > 1:
        assert sum(guided.done) > sum(guided.needed) / len(methods)
    assert sum(guided.done) <= sum(guided.needed)


def test_a_head_on_another_backbone_is_not_shared(tiny_lm, tiny_plain_lm):
    from types import SimpleNamespace

    from persalign.decoders.args_shared import shares_the_policy

    method = random_method("lore", tiny_lm.model.config.hidden_size)
    assert shares_the_policy(tiny_lm, SimpleNamespace(method=method, backbone=SimpleNamespace(lm=tiny_lm)))
    assert not shares_the_policy(tiny_lm, SimpleNamespace(method=method, backbone=SimpleNamespace(lm=tiny_plain_lm)))


RUN = ["seeds=[0,1]", "decoders=[{name: zero_shot}]", "reward.epochs=2", "args.selection=harmonic",
       "args.validation_size=8", "args.lambdas=[0,0.3,3]",
       "methods=[{name: global_rm}, {name: lore}, {name: global_rm_v2}]"]


def _run(path, *extra):
    from persalign.runner.run import run
    from tests.bad_input_helpers import QUIET
    from tests.test_runner import tiny_config

    return run(tiny_config(*RUN, *extra), path, **QUIET)


def _cells(store) -> dict:
    import json

    out = {}
    for folder in sorted(store.root.glob("cells/*/*/seed-*")):
        rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
        choice = folder / "lambda.json"
        out[folder.relative_to(store.root).as_posix()] = (rows, json.loads(choice.read_text()) if choice.exists() else None)
    return out


def test_a_run_decodes_every_method_and_seed_in_shared_passes_as_it_would_alone(tmp_path, cache_dir):
    """3 methods × 2 seeds with the pass and without: the same λ curves and choices, the same generations and
    scores except rows with a counted near-tie; the rows record fewer candidate forwards done than needed.
    Fails before issue #42 (no shared pass: done = needed, no such columns)."""
    shared_store = _run(tmp_path / "shared")
    shared, alone = _cells(shared_store), _cells(_run(tmp_path / "alone", "args.shared_pass=false"))
    summaries = [m["args_candidate_forwards"] for m in shared_store.all_metrics() if "args_candidate_forwards" in m]
    assert len(summaries) == 6 and not shared_store.problems  # every ARGS cell readable, with its forwards
    assert all(s["generation"]["done"] <= s["generation"]["needed"] for s in summaries)
    assert shared.keys() == alone.keys()
    needed = done = 0
    for cell, (rows, choice) in shared.items():
        alone_rows, alone_choice = alone[cell]
        if choice is not None:
            assert choice["lambda"] == alone_choice["lambda"] and choice["curve"] == alone_choice["curve"], cell
            assert choice["candidate_forwards_done"] <= choice["candidate_forwards"]
        for row, other in zip(rows, alone_rows):
            if row.get("args_near_ties", 0) == 0:
                assert (row["generation"], row["s_chosen"], row["s_rejected"]) == (
                    other["generation"], other["s_chosen"], other["s_rejected"]), cell
            assert row.get("args_candidate_forwards", 0) == other.get("args_candidate_forwards", 0)
            needed += row.get("args_candidate_forwards", 0)
            done += row.get("args_candidate_forwards_done", 0)
    assert 0 < done < needed


def test_a_resumed_run_reads_the_shared_batches_it_had_decoded(tmp_path, cache_dir, monkeypatch):
    """An ARGS cell lost after the pass decoded its batches (metrics and rows gone) is redone from the stored
    pass outputs: the same rows, no ARGS decode."""
    import shutil

    from persalign.runner import args_pass

    store = _run(tmp_path)
    before = _cells(store)
    lost = next(p for p in store.root.glob("cells/*/LoRE/seed-1"))
    for name in ("rows.jsonl", "metrics.json"):
        (lost / name).unlink()
    shutil.rmtree(store.root / "report", ignore_errors=True)
    calls, real = [], args_pass.shared_args_decode
    monkeypatch.setattr(args_pass, "shared_args_decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    after = _cells(_run(tmp_path))
    assert not calls
    key = lost.relative_to(store.root).as_posix()
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]  # noqa: E731
    assert strip(after[key][0]) == strip(before[key][0])


def test_a_damaged_shared_batch_is_set_aside_and_decoded_again(tmp_path, cache_dir, capsys):
    """Issue #56: a pass file missing its `done` field was a KeyError, one with cut ids an IndexError (41e66f0)."""
    import json

    store = _run(tmp_path)
    before = _cells(store)
    lost = next(p for p in store.root.glob("cells/*/LoRE/seed-1"))
    key = lost.relative_to(store.root).as_posix()
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_s")  # noqa: E731
                           and k != "args_candidate_forwards_done"} for r in rows]  # the pass's work: who shared it
    for damage in ("no done", "cut ids", "not an object"):
        for name in ("rows.jsonl", "metrics.json"):
            (lost / name).unlink()
        batch = sorted(store.root.glob("args_pass/*/generation-*.json"))[0]
        outputs = json.loads(batch.read_text())
        member = "LoRE/seed-1"  # the lost cell's own outputs (runner/args_pass.member_key)
        if damage == "no done":
            del outputs[member]["done"]
        elif damage == "cut ids":
            outputs[member]["ids"] = outputs[member]["ids"][:1]
        else:
            outputs[member] = [1, 2]
        batch.write_text(json.dumps(outputs))
        capsys.readouterr()
        after = _cells(_run(tmp_path))
        assert f"{batch.name}: damaged (member" in capsys.readouterr().err, damage
        assert strip(after[key][0]) == strip(before[key][0]), damage
        for aside in batch.parent.glob("*.damaged*"):
            aside.unlink()


def test_methods_at_lambda_zero_decode_each_batch_once(tmp_path, cache_dir, monkeypatch):
    """λ = 0 is greedy for every method: 3 methods × 2 seeds at a fixed λ = 0 decode each query batch once,
    not 6 times, and write the same outputs. Fails before issue #42 (each cell decoded its batches)."""
    from persalign.decoders import args

    calls, real = [], args.decode_from
    monkeypatch.setattr(args, "decode_from", lambda *a, **k: calls.append(1) or real(*a, **k))
    cells = _cells(_run(tmp_path, "args.selection=fixed", "args.fixed_lambda=0"))
    generations = {tuple(r["generation"] for r in rows) for key, (rows, _) in cells.items() if "Zero-Shot" not in key}
    assert len(generations) == 1
    batches = len({r["batch"] for rows, _ in cells.values() for r in rows if "batch" in r} or {0})
    assert 0 < len(calls) <= batches < 6


PAUSE = 0.1  # seconds added to every shared pass: far above a member's own work per batch on the tiny model


def _slow_pass(monkeypatch, seconds: float) -> None:
    """Every shared pass takes `seconds` longer: the charged time is then dominated by a known amount."""
    import time

    from persalign.runner import args_pass

    real = args_pass.shared_args_decode
    monkeypatch.setattr(args_pass, "shared_args_decode", lambda *a, **k: time.sleep(seconds) or real(*a, **k))


@pytest.mark.slow
def test_a_shared_pass_charges_its_seconds_to_every_member_by_share(tmp_path, cache_dir, monkeypatch):
    """A pass's seconds fall on whichever cell needs it first; each member is charged its share instead (by the
    candidate forwards its rows took), in the query batches and in the λ choice: every member's measured
    generation and λ seconds hold part of the passes, none nearly all, and their sum is what the passes took.
    Fails before the fix: the first member held every pass's seconds and the report showed 0.000 s / output
    for the others."""
    import json

    from persalign.runner import args_pass

    calls, real, phase, choose = [], args_pass.shared_args_decode, ["query"], args_pass.ArgsPass.choose_lambdas
    monkeypatch.setattr(args_pass, "shared_args_decode", lambda *a, **k: calls.append(phase[0]) or real(*a, **k))
    monkeypatch.setattr(args_pass.ArgsPass, "choose_lambdas",
                        lambda self: phase.__setitem__(0, "λ") or choose(self) or phase.__setitem__(0, "query"))
    _slow_pass(monkeypatch, PAUSE)
    store = _run(tmp_path / "fixed", "args.selection=fixed", "args.fixed_lambda=3")
    generation = [m["stage_seconds"]["generation_s"] for m in store.all_metrics() if m["decoder"] != "Zero-Shot"]
    assert len(generation) == 6 and len(calls) > 0
    assert sum(generation) >= PAUSE * len(calls) and max(generation) < 0.5 * sum(generation)
    assert min(generation) > PAUSE * len(calls) / 6 / 3  # every member holds a real part of the passes
    import sys
    sys.path.insert(0, "benchmarks")
    from bench_floor import done_share, metered_flops, run_work

    # bench_floor sets generation's seconds against the work done, not the work counted for each cell alone
    assert done_share(sum(run_work(store.root)["flops"].values()), metered_flops(store.root)["generation"]) < 0.8

    calls.clear()
    store = _run(tmp_path / "harmonic", "args.lambdas=[0.3,3]")  # every member decodes the grid in the pass
    choices = [json.loads(p.read_text()) for p in sorted(store.root.glob("cells/*/*/seed-*/lambda.json"))]
    seconds = [c["seconds"] for c in choices]
    assert len(choices) == 6 and calls.count("λ") > 0
    assert sum(seconds) >= PAUSE * calls.count("λ") and max(seconds) < 0.5 * sum(seconds)


@pytest.mark.slow
@pytest.mark.needs_models
def test_smollm2_rows_of_one_pass_decode_as_each_head_alone():
    """The same check on SmolLM2-135M and real headlines: 4 heads × 2 λ over 3 prompts in one pass."""
    from persalign.core.prompts import PromptFormatter
    from persalign.data.demo_authors import demo_records
    from persalign.models.loading import load_causal_lm

    lm = load_causal_lm("smollm2-135m-instruct")
    formatter = PromptFormatter(lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids(r["input"]) for r in demo_records()[:3]]
    rows, expected = [], []
    for method in heads(lm, ("global_rm_v2", "lore")).values():
        for lam in (0.1, 1.0):
            rows += [HeadRow(tuple(p), method, u, lam) for p, u in zip(prompts, USERS)]
            expected += alone(lm, method, prompts, lam, 10, 10)
    shared = shared_args_decode(lm, rows, 10, 10)
    differ = [i for i, (a, b) in enumerate(zip(shared.ids, expected)) if a != b]
    assert all(shared.near_ties[i] > 0 for i in differ) and len(differ) <= len(rows) // 10, differ
    assert len({tuple(ids) for ids in expected}) > len(prompts) and sum(shared.done) < sum(shared.needed)

"""The shared ARGS pass on the local pool, split in tasks that run side by side (issue #73: every core).

A policy's pass was one task (79 min of the full news study's 128 on 2 workers, its critical path at any worker
count). It is now: the λ choice's validation decodes in parts, the λ choice of every member, the query batches in
parts (each batch decoded for every member
at once, as in-process), and the members' evaluation on the stored rows (one task per seed past 2 workers); a
GenARM cell, which the pass never takes as a row, is a cell task of its own. The numbers stay the in-process
run's, raw floats included.

    pytest tests/test_pass_tasks.py
"""

from __future__ import annotations

import json
import tempfile

import pytest

from persalign.core.config import load_config
from persalign.runner.pool_backend import PoolOptions
from persalign.runner.resolve import resolve_run
from persalign.runner.run import run
from persalign.runner.store import RunStore
from persalign.runner.task_graph import Submitter, submit_all
from tests.golden import TINY_ALL_DEPLOYMENTS, assert_same, view

TWO_SEEDS = [*TINY_ALL_DEPLOYMENTS, "seeds=[0, 1]"]


class Recorded:
    def __init__(self, name, args, heavy=False):
        self.name, self.needs, self.heavy = name, [a for a in args if isinstance(a, Recorded)], heavy
        self.planned = next((a for a in args if hasattr(a, "cell")), None)  # a cell's or a fit's PlannedCell


class Recorder:
    """A backend that records each task and the tasks it waits for instead of running it."""

    in_place = True

    def __init__(self):
        self.tasks = []

    def remote(self, fn, priority=0, heavy=False):
        tasks = self.tasks

        class Remote:
            @staticmethod
            def remote(*args):
                tasks.append(Recorded(fn.__name__, args, heavy))
                return tasks[-1]

        return Remote


def graph(workers_parts: int, by_seed: bool, overrides: tuple = ()):
    config = load_config("demo-baselines", [*TWO_SEEDS, *overrides])
    recorder, cells = Recorder(), list(resolve_run(config).cells)
    with tempfile.TemporaryDirectory() as empty:
        submit_all(Submitter(recorder, config, RunStore(empty), shared_args=True, pass_parts=workers_parts,
                             members_by_seed=by_seed), cells, cells)
    return recorder.tasks


def test_the_pass_is_validation_parts_a_lambda_task_batch_parts_then_members_by_seed_and_genarm_beside():
    tasks = graph(6, by_seed=True)
    kinds = [t.name for t in tasks]
    assert kinds.count("args_validation_files") == 6 and kinds.count("args_lambdas_files") == 1
    assert kinds.count("args_batches_files") == 6 and kinds.count("args_members_files") == 2  # one per seed
    lambdas = next(t for t in tasks if t.name == "args_lambdas_files")
    validation = [t for t in tasks if t.name == "args_validation_files"]
    assert set(validation) <= set(lambdas.needs)  # the λ choice reads every stored validation group
    assert all(set(v.needs) == set(lambdas.needs) - set(validation) for v in validation)  # the RMs, as λ did
    parts = [t for t in tasks if t.name == "args_batches_files"]
    assert all(part.needs == [lambdas] for part in parts)
    members = [t for t in tasks if t.name == "args_members_files"]
    assert all(set(parts) <= set(m.needs) for m in members)
    trained = {t for t in tasks if t.name == "train_files"}
    # λ waits for the pass rows' RMs (Global RM, LoRE: 2 seeds each), not for GenARM's or P-DPO's fits
    assert len(set(lambdas.needs) & trained) == 4 and all(len(set(v.needs) & trained) == 4 for v in validation)
    genarm_cells = [t for t in tasks if t.name == "cell_files" and set(t.needs) & trained
                    and not set(t.needs) & set(parts)]
    assert len(genarm_cells) >= 2  # GenARM (2 seeds), and P-DPO's soft-prompt cells, beside the pass
    assert not any(set(t.needs) & set(parts + validation + [lambdas]) for t in genarm_cells)


def test_the_memory_heavy_tasks_are_the_fits_and_cells_that_made_the_full_studys_peaks():
    """Heavy (at most `heavy_at_once` side by side): GenARM's and P-DPO's fits, GenARM's cells, the λ choice's
    validation passes, and ICL / ICL-RAG cells of 8 x 16 demonstrations a batch; in the full news study any two of
    them side by side held 3.9-4.7 GiB. Before, only the two fits were heavy."""
    tasks = graph(4, by_seed=False, overrides=(
        "generation.batch_size=16", "decoders=[{name: zero_shot}, {name: icl, shots: 8}, {name: icl_rag, shots: 8}, "
        "{name: icl_rag, shots: 4}]"))
    heavy = sorted({(t.name, t.planned.method.name if t.planned.method else t.planned.decoder_config.shots)
                    if t.planned else (t.name, None) for t in tasks if t.heavy}, key=str)
    assert heavy == sorted([("args_validation_files", None), ("cell_files", "genarm"), ("cell_files", 8),
                            ("train_files", "genarm"), ("train_files", "pdpo")], key=str)
    heavy_cells = sorted(t.planned.cell.decoder for t in tasks if t.name == "cell_files" and t.heavy)
    assert heavy_cells == sorted(2 * ["GenARM", "GenARM (Best-of-N)", "ICL (8-shot)"] + ["ICL-RAG (8-shot)"])


def test_half_the_workers_take_heavy_tasks_by_default():
    assert [PoolOptions(workers).heavy_at_once for workers in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]
    assert PoolOptions(8, heavy_at_once=1).heavy_at_once == 1


def test_two_workers_keep_the_members_in_one_task():
    assert [t.name for t in graph(4, by_seed=False)].count("args_members_files") == 1


def test_three_workers_give_the_in_process_numbers_with_the_pass_in_tasks(tmp_path, cache_dir):
    """λ task, 6 batch parts, members by seed and GenARM beside them, against the same run in one process."""
    views = {}
    for workers in (1, 3):
        run(load_config("demo-baselines", TWO_SEEDS), tmp_path / f"w{workers}", log=lambda *_: None,
            backend=PoolOptions(workers))
        views[workers] = json.loads(json.dumps(view(tmp_path / f"w{workers}")))
    assert_same(views[1], views[3])  # raw floats included


def test_a_lost_lambda_choice_is_made_again_from_the_validation_groups_it_had_stored(tmp_path, cache_dir,
                                                                                      monkeypatch, capsys):
    """Every ARGS cell lost with its λ after the validation passes ran (as when the λ task is interrupted after
    its parts): the choice reads the stored groups, decodes nothing, and gives the same λ, curves, forwards and
    metered work. A damaged group is set aside, named, and decoded again to the same choice. Fails before the λ
    choice stored its groups (issue #73: it decoded every validation pass again)."""
    import shutil

    from persalign.runner import args_pass
    from tests.test_args_shared import _cells, _run

    store = _run(tmp_path)
    before = {key: choice for key, (_, choice) in _cells(store).items() if choice is not None}
    calls, real = [], args_pass.shared_args_decode
    monkeypatch.setattr(args_pass, "shared_args_decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    groups = sorted(store.root.glob("args_pass/*/validation-*.json"))
    assert len(groups) >= 2
    for damage in (None, "heads"):
        for key in before:
            shutil.rmtree(store.root / key)
        if damage:
            stored = json.loads(groups[0].read_text())
            groups[0].write_text(json.dumps({**stored, damage: [1, 2]}))
        calls.clear()
        capsys.readouterr()
        after = {key: choice for key, (_, choice) in _cells(_run(tmp_path)).items() if choice is not None}
        assert len(calls) == (1 if damage else 0), damage  # the query batches are stored too: no decode
        assert (f"{groups[0].name}: damaged" in capsys.readouterr().err) == bool(damage)
        for key, choice in before.items():
            kept = ("lambda", "curve", "candidate_forwards", "candidate_forwards_done", "near_ties", "shared_pass_members")
            assert {k: after[key][k] for k in kept} == {k: choice[k] for k in kept}, (damage, key)
            assert after[key]["shared_flops"] == pytest.approx(choice["shared_flops"], rel=1e-9), (damage, key)


def test_the_projection_splits_a_whole_lambda_choice_into_its_passes_and_its_choosing():
    """benchmarks/project_workers.lambda_split: members charged o + S × share (their share of the passes by
    candidate forwards) give back S (the passes, which the validation parts take) and the choosing, n × o."""
    import sys

    sys.path.insert(0, "benchmarks")
    from project_workers import lambda_split

    done = [812.0, 95.5, 300.0, 40.0, 1200.0, 610.0]
    choices = [{"candidate_forwards_done": d, "seconds": 17.5 + 1578.0 * d / sum(done)} for d in done]
    passes, choosing = lambda_split(choices)
    assert passes == pytest.approx(1578.0) and choosing == pytest.approx(6 * 17.5)
    assert lambda_split(choices[:2]) == pytest.approx((sum(c["seconds"] for c in choices[:2]), 0.0))  # no line

"""`persalign plan --choose-design` (issue #75): the noise model of Findings 1-2 and the design search.

    pytest tests/test_design_choice.py
"""

from __future__ import annotations

import numpy as np
import pytest

from persalign.analysis.true_correlation import noise_parts
from persalign.planner.design_choice import Candidate, Reach, RunCost, candidates, choose, fisher_halfwidth
from persalign.planner.noise_components import MetricNoise, metric_noise
from persalign.planner.power import Components

TRUTH = {"v_user": 4.0, "v_item": 30.0, "v_seed": 20.0, "v_method_seed": 1.5}


def simulated(rng, methods: int, users: int, queries: int, seeds: int, spread: float = 3.0):
    """(values (k, S, J), users of the queries, the methods' true means): each component drawn independently per
    method, so the across-method share of each is its variance (TRUTH)."""
    true = rng.normal(0, spread, methods)
    per_user = rng.normal(0, np.sqrt(TRUTH["v_user"]), (methods, users)).repeat(queries, axis=1)
    per_item = rng.normal(0, np.sqrt(TRUTH["v_item"]), (methods, users * queries))
    shift = rng.normal(0, np.sqrt(TRUTH["v_method_seed"]), (methods, seeds))
    per_seed = rng.normal(0, np.sqrt(TRUTH["v_seed"]), (methods, seeds, users * queries))
    values = true[:, None, None] + shift[:, :, None] + (per_user + per_item)[:, None, :] + per_seed
    return values, [f"u{j // queries}" for j in range(users * queries)], true


def test_the_components_are_recovered_from_simulated_rows():
    """Each component's mean estimate over 300 studies within 10 % of its true value (and v_user within 1.0: it is
    the smallest and noisiest); a decomposition that put the seeds' shift of a method into the queries' seed
    spread would read v_seed 21.5 (20 + 1.5) and no v_method_seed here."""
    rng = np.random.default_rng(0)
    found = [metric_noise(*simulated(rng, 8, 12, 6, 3)[:2]) for _ in range(300)]
    means = {name: float(np.mean([getattr(f, name) for f in found])) for name in TRUTH}
    for name in ("v_item", "v_seed", "v_method_seed"):
        assert means[name] == pytest.approx(TRUTH[name], rel=0.1), (name, means)
    assert abs(means["v_user"] - TRUTH["v_user"]) < 1.0, means


def test_the_noise_predicted_at_another_design_is_the_noise_measured_there():
    """Components measured at 10 users × 4 queries × 2 seeds predict what a study at 40 × 12 × 3 measures: the mean
    over studies of the users' noise (noise_parts' N) plus the seeds' shift / s, within 10 %."""
    rng = np.random.default_rng(1)
    small = [metric_noise(*simulated(rng, 8, 10, 4, 2)[:2]) for _ in range(200)]
    predicted = float(np.mean([m.noise(40, 12, 3) for m in small]))
    measured = []
    for _ in range(200):
        values, users, true = simulated(rng, 8, 40, 12, 3)
        means = values.mean(axis=(1, 2))
        measured.append(np.var(means - true, ddof=1))  # the methods' means around their true means, across methods
    assert predicted == pytest.approx(float(np.mean(measured)), rel=0.1)
    at_run = small[0]
    assert at_run.noise(*at_run.run_design) == pytest.approx(at_run.user_noise + at_run.v_method_seed / 2)


def test_noise_parts_share_is_the_components_at_the_runs_design():
    """N_run (what the report's reliability uses) is p(q_run, S) / U_run in expectation, with unclipped parts."""
    rng = np.random.default_rng(2)
    ratios = []
    for _ in range(300):
        values, users, _ = simulated(rng, 8, 12, 5, 3)
        found = metric_noise(values, users)
        per_user = found.v_user + (found.v_item + found.v_seed / 3) / 5
        user_means = values.mean(axis=1).reshape(8, 12, 5).mean(axis=2)
        ratios.append(noise_parts(user_means, user_means)["N"]["xx"] / (per_user / 12))
    assert float(np.median(ratios)) == pytest.approx(1.0, abs=0.1)


def metric(true: float, user_noise: float, v_method_seed: float = 0.0) -> MetricNoise:
    return MetricNoise(0.0, 60.0, 30.0, v_method_seed, true + user_noise + v_method_seed / 3, user_noise, 10, (13, 6.0, 3))


def test_users_needed_reach_the_target_and_say_when_seeds_alone_keep_it_below():
    noise = metric(1.0, 1.0)
    users, bound = noise.users_for(0.8, 6.0, 3)
    assert not bound and noise.reliability(users, 6.0, 3) >= 0.8 > noise.reliability(users - 1, 6.0, 3)
    shifted = metric(1.0, 1.0, v_method_seed=1.5)  # a seed's shift of 1.5 / 1 seed: reliability ≤ 0.4
    assert shifted.users_for(0.8, 6.0, 1) == (None, False)
    assert metric(-0.5, 1.0).users_for(0.5, 6.0, 3)[1]  # T ≤ 0: only a lower bound


class Noise:
    def __init__(self, metrics):
        self.metrics = metrics


def test_the_search_keeps_the_budget_and_a_larger_budget_reads_better():
    noise = Noise({"rm_accuracy": metric(2.0, 1.0), "policy_accuracy": metric(0.3, 0.4, 0.05),
                   "rouge1": metric(0.1, 0.07, 0.15)})
    cost = RunCost(seeded_per_item=2.0, free_per_item=5.0, per_seed=900.0, per_user_seed=10.0, per_pair=0.3)
    reach = Reach(20, 67, sorted(np.random.default_rng(0).integers(10, 60, 67).tolist(), reverse=True), 4000)
    designs = candidates(reach, noise, Components(6.0, 17.0, "stated"), cost, workers=2)
    assert all(d.harmonic <= d.items / d.users <= d.queries for d in designs)
    small, large = choose(designs, 1.0), choose(designs, 4.0)
    assert small.hours <= 1.0 and large.hours <= 4.0 and large.weakest > small.weakest
    assert all(d.users <= 33 and d.queries <= max(reach.eligible) for d in designs)
    assert choose(designs, 0.01) is None
    assert isinstance(large, Candidate) and large.reliability["rouge1"] == large.weakest


def test_fewer_than_four_methods_give_no_fisher_interval_and_ten_give_the_stated_one():
    assert fisher_halfwidth(3) == 1.0 and fisher_halfwidth(10) == pytest.approx(0.63, abs=0.005)


def test_choose_design_without_a_run_or_with_no_workers_is_refused_in_one_line(capsys):
    from tests.bad_input_helpers import cli_error
    from tests.test_planning import PLAN

    line = cli_error(capsys, PLAN + ["--choose-design"])
    assert line.startswith("persalign: error: --choose-design needs --from-run RUN_DIR"), line
    line = cli_error(capsys, PLAN + ["--workers", "0"])
    assert line == "persalign: error: --workers: 0 is not allowed (must be a number of pool workers from 1 to 4096)"


def test_the_choice_reads_a_stored_run_and_says_what_the_data_cannot_give(tmp_path, cache_dir):
    """The whole path on a tiny run of the built-in data (8 authors): components, seconds and reach are read, no
    design has 6 adaptation users beside as many training, and the needs and the method-count limit are stated."""
    from persalign.core.config import load_config
    from persalign.planner.design_choice import choice_report
    from persalign.runner.run import run
    from tests.test_runner import TINY

    config = load_config("demo-baselines", TINY + ["decoders=[{name: icl, shots: 2}]", "args.selection=fixed",
                         "methods=[{name: global_rm}, {name: lore}, {name: pref}]", "reward.epochs=1"])
    run(config, tmp_path / "run", log=lambda *_: None)
    text = choice_report(config, str(tmp_path / "run"), None, 2)
    assert "3 users × 5.0 queries × 2 seeds, 3 reward methods; 2 workers" in text, text
    assert "no design: 6 adaptation users are needed beside as many training the reward models, and this data has 8 " \
           "authors at ≥ 10 items" in text
    assert "- Finding 1: rm_accuracy reliability 0.5: " in text and "across 3 distinct methods" in text


def test_the_seeds_that_make_a_target_reachable_are_the_fewest_that_do():
    shifted = metric(1.0, 1.0, v_method_seed=1.5)  # T = 1: 0.8 needs the seeds' shift 1.5 / s below 0.25
    seeds = shifted.seeds_for(0.8)
    assert seeds == 7 and shifted.users_for(0.8, 6.0, seeds)[0] is not None
    assert shifted.users_for(0.8, 6.0, seeds - 1)[0] is None

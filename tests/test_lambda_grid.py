"""The λ grid decoded in one pass (issue #31 point 3): same choice and curve as one λ at a time, fewer passes.

    pytest tests/test_lambda_grid.py
"""

import json

import pytest

from persalign.runner.run import run
from tests.bad_input_helpers import QUIET
from tests.test_runner import tiny_config

GRID = [0.0, 0.3, 1.0, 3.0, 10.0]


def _lambda_choice(tmp_path, grid, *extra) -> dict:
    config = tiny_config(*extra, "seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]",
                         "reward.epochs=2", "args.selection=harmonic", "args.validation_size=8",
                         "generation.batch_size=4", f"args.lambdas={json.dumps(grid)}")
    store = run(config, tmp_path, **QUIET)
    (path,) = store.root.glob("cells/*/Global_RM/seed-0/lambda.json")
    return json.loads(path.read_text())


def test_the_grid_in_one_pass_gives_each_lambdas_curve_values_and_the_same_choice(tmp_path, cache_dir):
    """Each λ alone (grid [0, λ]: its rows are decoded as before, batch_size prompts per pass) is the
    reference for that λ's point of the curve decoded with the whole grid at once."""
    together = _lambda_choice(tmp_path / "grid", GRID)
    curve = together["curve"]
    best = max(range(len(GRID)), key=lambda i: (curve["harmonic"][i], -GRID[i]))
    assert together["lambda"] == GRID[best]
    for index, lam in enumerate(GRID[1:], start=1):
        alone = _lambda_choice(tmp_path / f"alone-{lam}", [0.0, lam])["curve"]
        for key in ("policy_accuracy", "rouge1", "inverse_perplexity", "harmonic"):
            assert curve[key][index] == alone[key][1], (lam, key)
            assert curve[key][0] == alone[key][0], (0.0, key)


def test_the_nonzero_lambdas_are_rows_of_the_same_passes(tmp_path, cache_dir, monkeypatch):
    """8 validation prompts, batch_size 4, 4 nonzero λ: 2 passes of 16 rows, not 8 passes of 4 rows.
    Fails before issue #31 point 3 (one pass per λ and batch)."""
    from persalign.decoders import args_lambda

    passes = []
    real = args_lambda.args_decode_graphed_where_possible  # the grid's decode: eager here (no args.cuda_graph)

    def counting(graphs, policy, guide, prompts, max_new_tokens, *rest, **kwargs):
        passes.append((len(prompts), sorted(set([guide.lam] if isinstance(guide.lam, float) else guide.lam))))
        return real(graphs, policy, guide, prompts, max_new_tokens, *rest, **kwargs)

    monkeypatch.setattr(args_lambda, "args_decode_graphed_where_possible", counting)
    _lambda_choice(tmp_path, GRID, "args.shared_pass=false")  # a cell decoding alone (no shared pass)
    assert passes == [(16, GRID[1:]), (16, GRID[1:])]


@pytest.mark.parametrize("lam", [[0.5, 2.0], 0.5])
def test_per_row_lambda_equals_the_same_lambda_given_once(tiny_lm, lam):
    """RewardGuide takes one λ or one per row; the same value either way decodes the same tokens."""
    from persalign.decoders.args_decoding import RewardGuide, args_decode
    from tests.test_rewards_args import prompts_of, random_method

    method = random_method("lore", tiny_lm.model.config.hidden_size)
    prompts = prompts_of(tiny_lm, ["rain", "a long day at the council"])
    rows = lam if isinstance(lam, list) else [lam, lam]
    per_row = args_decode(tiny_lm, RewardGuide(tiny_lm, method, ["u0", "u1"], rows, 4), prompts, 6)
    for row, value in enumerate(rows):
        once = args_decode(tiny_lm, RewardGuide(tiny_lm, method, [["u0", "u1"][row]], value, 4), [prompts[row]], 6)
        assert once[0] == per_row[row]

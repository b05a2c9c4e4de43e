"""Conformance suite: every registered reward method, now and later, must pass these.

Synthetic data on the tiny Llama: two user groups hold OPPOSITE preferences
(group A prefers responses ending in '!', group B the same text ending in '.').
Personalized methods, fitted on train users and adapted on a few support
pairs of unseen users, must rank both groups' query pairs well; a global RM
cannot serve both groups at once. Also: save/load round trip, ARGS candidate
rewards = teacher-forced prefix rewards, finite rewards, determinism.
Methods run with their own defaults (the same code path as `persalign run`).
"""

import numpy as np
import pytest
import torch

from persalign.core.config import MethodConfig, RewardConfig
from persalign.core.prompts import PromptFormatter
from persalign.core.registry import METHODS
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode
from persalign.rewards.backbone import RewardBackbone, pad_states
from persalign.rewards.method import resolve_settings as method_settings
from persalign.rewards.train import PairData, evaluate_pairs

WORDS = ["red", "blue", "cat", "dog", "sun", "rain", "big", "small", "fast", "slow", "old", "new"]
# Every registered method that learns from pairs, installed plugins included. Pretrained reward models
# (hf_rm: an off-the-shelf classifier, nothing fitted) have their own suite, tests/test_hf_rm.py.
EVERY_METHOD = [n for n in METHODS.names() if not getattr(METHODS.get(n), "pretrained", False)]
# Policy-side methods (P-DPO) have no reward model: they rank pairs with their implicit reward and
# deploy by generation, so the ARGS test is replaced by a generation test in tests/test_pdpo.py.
POLICY_SIDE = [n for n in EVERY_METHOD if getattr(METHODS.get(n), "policy_side", False)]
ALL_METHODS = [n for n in EVERY_METHOD if n not in POLICY_SIDE]
PERSONALIZED = [n for n in EVERY_METHOD if METHODS.get(n).personalized]


def opposite_pairs(lm, users_by_group: dict[str, list[str]], n: int, seed: int) -> PairData:
    """The same n (prompt, '!' vs '.') pairs for every user; chosen depends on the user's group."""
    rng = np.random.default_rng(seed)
    formatter = PromptFormatter(lm.tokenizer, "headline")
    texts = [" ".join(rng.choice(WORDS, size=3)) for _ in range(n)]
    data = PairData([], [], [], [])
    for group, users in users_by_group.items():
        for user in users:
            for i, text in enumerate(texts):
                bang, dot = formatter.response_ids(text + "!"), formatter.response_ids(text + ".")
                data.users.append(user)
                data.prompts.append(formatter.prompt_ids(f"article {seed}-{i}"))
                data.chosen.append(bang if group == "A" else dot)
                data.rejected.append(dot if group == "A" else bang)
    return data


TRAIN = {"A": ["a1", "a2", "a3", "a4"], "B": ["b1", "b2", "b3", "b4"]}
NEW = {"A": ["a-new1", "a-new2"], "B": ["b-new1", "b-new2"]}


def is_policy_side(name) -> bool:
    return name in POLICY_SIDE


def scores(method, name, backbone, data: PairData, responses):
    """Sequence rewards (reward models) or implicit rewards (policy-side methods) of `responses`."""
    with torch.no_grad():
        if is_policy_side(name):
            return torch.as_tensor(method.implicit_rewards(backbone.lm, data.users, data.prompts, responses))
        padded, mask = pad_states(method.features(backbone, data.prompts, responses))
        return method.sequence_rewards(padded, mask, method.user_ids(data.users))


def build(name, seed=0):
    cls = METHODS.get(name)
    return cls(64, method_settings(cls, MethodConfig(name), RewardConfig(), seed))


@pytest.fixture(scope="module")
def backbone(tiny_lm):
    return RewardBackbone(tiny_lm, "tiny-conformance")


@pytest.fixture(scope="module")
def fitted(tiny_lm, backbone):
    """Each method fitted on the train users and adapted to the new users (once per module)."""
    cache = {}

    def get(name):
        if name not in cache:
            method = build(name)
            where = tiny_lm if is_policy_side(name) else backbone  # policy-side methods train the policy's inputs
            method.fit(where, opposite_pairs(tiny_lm, TRAIN, 24, 0), opposite_pairs(tiny_lm, TRAIN, 6, 1))
            for group, users in NEW.items():
                for user in users:
                    method.adapt(where, user, opposite_pairs(tiny_lm, {group: [user]}, 8, 2))
            cache[name] = method.eval()
        return cache[name]

    return get


def group_accuracy(method, name, backbone, lm, group) -> float:
    data = opposite_pairs(lm, {group: NEW[group]}, 20, 3)
    if is_policy_side(name):
        return float(100 * (scores(method, name, backbone, data, data.chosen) >
                            scores(method, name, backbone, data, data.rejected)).float().mean())
    return evaluate_pairs(method, backbone, data)["accuracy"]


@pytest.mark.slow
@pytest.mark.parametrize("name", PERSONALIZED)
def test_personalized_methods_serve_both_opposite_groups(name, fitted, backbone, tiny_lm):
    method = fitted(name)
    accuracies = {g: group_accuracy(method, name, backbone, tiny_lm, g) for g in NEW}
    assert min(accuracies.values()) >= 75, accuracies


def test_global_rm_cannot_serve_both_groups(fitted, backbone, tiny_lm):
    for name in [n for n in ALL_METHODS if not METHODS.get(n).personalized]:
        accuracies = [group_accuracy(fitted(name), name, backbone, tiny_lm, g) for g in NEW]
        assert min(accuracies) <= 60, (name, accuracies)


@pytest.mark.parametrize("name", EVERY_METHOD)
def test_save_load_round_trip_gives_identical_rewards(name, fitted, tmp_path, tiny_lm, backbone):
    method = fitted(name)
    method.save(tmp_path / name)
    loaded = METHODS.get(name).load(tmp_path / name)
    data = opposite_pairs(tiny_lm, NEW, 3, 4)
    if is_policy_side(name):
        assert torch.equal(scores(method, name, backbone, data, data.chosen),
                           scores(loaded, name, backbone, data, data.chosen))
        return
    padded, mask = pad_states(method.features(backbone, data.prompts, data.chosen))
    loaded.bind(backbone.lm)
    users = method.user_ids(data.users)
    with torch.no_grad():
        assert torch.equal(method.prefix_rewards(padded, mask, users), loaded.prefix_rewards(padded, mask, users))


@pytest.mark.parametrize("name", ALL_METHODS)
def test_rewards_are_finite_and_candidates_match_prefix_rewards(name, fitted, tiny_lm, backbone):
    method = fitted(name)
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids("article x"), formatter.prompt_ids("another longer article")]
    users = ["a-new1", "b-new1"]
    trace = []
    generated = args_decode(tiny_lm, RewardGuide(tiny_lm, method, users, lam=1.0, top_k=3), prompts,
                            max_new_tokens=4, record=DecodeRecord(trace=trace))
    for row, (prompt, user) in enumerate(zip(prompts, users)):
        for step, (candidates, rewards) in enumerate(trace[: len(generated[row])]):
            assert torch.isfinite(rewards).all()
            for j in range(candidates.shape[1]):
                response = generated[row][:step] + [int(candidates[row, j])]
                padded, mask = pad_states(method.features(backbone, [prompt], [response]))
                with torch.no_grad():
                    expected = method.sequence_rewards(padded, mask, method.user_ids([user]))[0]
                assert abs(float(rewards[row, j]) - float(expected)) <= 1e-4


@pytest.mark.parametrize("name", EVERY_METHOD)
def test_training_is_deterministic_under_a_seed(name, tiny_lm, backbone):
    data = opposite_pairs(tiny_lm, {"A": ["a1"], "B": ["b1"]}, 8, 5)
    outputs = []
    for seed in (3, 3, 4):
        method = build(name, seed=seed)
        method.settings.epochs = 3
        method.settings.max_steps = 3 if is_policy_side(name) else method.settings.max_steps
        method.fit(tiny_lm if is_policy_side(name) else backbone, data, None)
        outputs.append(scores(method.eval(), name, backbone, data, data.chosen))
    # Same seed: the same rewards (an intermittent ~1e-4 CPU-rounding difference was seen for MPU-Avg,
    # hence the tolerance); another seed: clearly different rewards, so the seed is really used.
    assert torch.allclose(outputs[0], outputs[1], rtol=0, atol=5e-3)
    if name != "pref":  # PReF starts from a deterministic SVD: its result need not depend on the seed
        assert (outputs[0] - outputs[2]).abs().max() > 5e-3


def test_query_items_are_never_seen_during_fit_or_adapt():
    """By construction: fit sees the train users' train pairs, adapt the support pairs; never query ids."""
    from persalign.core.config import DataConfig, SplitConfig
    from persalign.core.registry import DATASETS
    from persalign.data.preflamp import build_pref_lamp
    from persalign.data.split import make_split
    from persalign.data.writing import keep_active_users
    from persalign.models.embedders import HashingBowEmbedder

    writing = keep_active_users(DATASETS.get("demo")(DataConfig()), DataConfig())
    dataset = build_pref_lamp(writing, HashingBowEmbedder(), SplitConfig(adapt_fraction=0.25), top_k=5, seed=0)
    split = make_split(dataset, SplitConfig(adapt_fraction=0.25))
    seen = {i for ids in split.train.values() for i in ids} | {i for ids in split.heldout.values() for i in ids}
    seen |= {i for ids in split.support.values() for i in ids}
    assert not seen & set(split.query_ids())


def test_pref_warm_start_uses_svd_when_users_share_pairs_and_falls_back_when_sparse(tiny_lm, backbone):
    dense = build("pref")
    dense.fit(backbone, opposite_pairs(tiny_lm, TRAIN, 8, 0), None)
    assert dense.init_note.startswith("svd")
    sparse = build("pref")
    data = PairData([], [], [], [])
    for k, user in enumerate(TRAIN["A"] + TRAIN["B"]):  # every user rates different pairs
        part = opposite_pairs(tiny_lm, {"A" if user.startswith("a") else "B": [user]}, 4, 10 + k)
        for field in ("users", "prompts", "chosen", "rejected"):
            getattr(data, field).extend(getattr(part, field))
    sparse.fit(backbone, data, None)
    assert sparse.init_note.startswith("default")


@pytest.mark.parametrize("name", EVERY_METHOD)
def test_a_users_rewards_do_not_depend_on_the_order_users_are_adapted_in(name, fitted, tiny_lm, backbone, tmp_path):
    """Issue #28: MPU and PAL seeded a new user's row by its position, so adapting a before b changed a."""
    fitted(name).save(tmp_path / name)  # each order adapts its own copy of the fitted method
    where = tiny_lm if is_policy_side(name) else backbone
    support = {"late-a": opposite_pairs(tiny_lm, {"A": ["late-a"]}, 8, 6),
               "late-b": opposite_pairs(tiny_lm, {"B": ["late-b"]}, 8, 7)}
    query = opposite_pairs(tiny_lm, {"A": ["late-a"], "B": ["late-b"]}, 4, 8)
    results = []
    for order in (["late-a", "late-b"], ["late-b", "late-a"]):
        method = METHODS.get(name).load(tmp_path / name).train()
        if not is_policy_side(name):
            method.bind(backbone.lm)
        for user in order:
            method.adapt(where, user, support[user])
        results.append(scores(method.eval(), name, backbone, query, query.chosen))
    assert torch.equal(results[0], results[1]), (results[0] - results[1]).abs().max()

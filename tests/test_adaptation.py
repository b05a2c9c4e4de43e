"""Adaptation to a new user: runs its budget and keeps the final parameters; independent of adaptation order."""

import copy

import pytest
import torch

from persalign.core.registry import METHODS
from persalign.rewards.backbone import RewardBackbone
from persalign.rewards.train import PairData, evaluate_pairs
from tests.method_settings import plain_settings
from tests.test_rewards_args import toy_pairs


def fitted(name, tiny_lm, **settings):
    backbone = RewardBackbone(tiny_lm, "tiny-adapt")
    method = METHODS.get(name)(tiny_lm.model.config.hidden_size, plain_settings(name, **settings))
    method.fit(backbone, toy_pairs(tiny_lm, 24, 0), toy_pairs(tiny_lm, 6, 1))
    return method.eval(), backbone


def support_for(tiny_lm, user, seed, n=6):
    data = toy_pairs(tiny_lm, n, seed)
    return PairData([user] * n, data.prompts, data.chosen, data.rejected)


def test_adaptation_keeps_the_final_parameters_and_improves_on_one_epoch(tiny_lm):
    base, backbone = fitted("lore", tiny_lm, epochs=5, head_lr=1e-2)
    support = support_for(tiny_lm, "new", 7)
    losses = {}
    for epochs in (1, 60):
        method = copy.deepcopy(base)
        method.settings.adapt_epochs = epochs
        snapshots = []
        method.after_step = lambda m=method, kept=snapshots: kept.append(m.head.user_logits.detach().clone())
        method.adapt(backbone, "new", support)
        assert torch.equal(method.head.user_logits, snapshots[-1])  # the final parameters, not a snapshot
        losses[epochs] = evaluate_pairs(method.eval(), backbone, support)["loss"]
    assert losses[60] < losses[1] - 1e-3


@pytest.mark.parametrize("name", ["pref", "mpu_avg"])
def test_adaptation_order_does_not_change_rewards(tiny_lm, name):
    base, backbone = fitted(name, tiny_lm, epochs=3, adapt_epochs=5)
    supports = {"a": support_for(tiny_lm, "a", 3), "b": support_for(tiny_lm, "b", 4)}
    rewards = []
    for order in (["a", "b"], ["b", "a"]):
        method = copy.deepcopy(base)
        for user in order:
            method.adapt(backbone, user, supports[user])
        method.eval()
        rewards.append({u: evaluate_pairs(method, backbone, supports[u])["loss"] for u in supports})
    assert rewards[0] == rewards[1]

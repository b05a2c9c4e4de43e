"""Eq. 5-6 (s_RGD) by hand on a three-token response, for every pooling, against the runner's scoring path."""

import numpy as np
import pytest
import torch
from torch import nn

from persalign.core.registry import METHODS
from persalign.decoders.args_lambda import policy_accuracy_curve
from persalign.rewards.backbone import RewardBackbone
from persalign.rewards.method import MethodSettings, RewardMethod
from persalign.rewards.policy_scoring import logprob_sums, reward_sums, s_rgd
from tests.method_settings import plain_settings
from tests.test_rewards_args import prompts_of, toy_pairs


class FixedHead(nn.Module):
    """Token reward r_t = the feature value itself, so every sum can be written down by hand."""

    def __init__(self, pooling: str):
        super().__init__()
        self.pooling = pooling

    def token_rewards(self, states, users):
        return states[..., 0]


class FixedRewards(RewardMethod):
    def __init__(self, pooling: str):
        self._pooling = pooling
        super().__init__(1, MethodSettings())

    def make_head(self):
        return FixedHead(self._pooling)

    def features(self, backbone, prompts, responses):
        return [torch.tensor(r, dtype=torch.float32)[:, None] for r in responses]


# token rewards 1, 2, 4:  per-step reward r(y_t | x, y<t) and its sum over t
HAND = {
    "last": 1 + 2 + 4,                    # head on each prefix y<=t: its last-token reward
    "mean": 1 + (1 + 2) / 2 + (1 + 2 + 4) / 3,  # running mean of the prefix
    "sum": 1 + 2 + 4,                     # token-level (GenARM): each token's own reward, counted once
}
SEQUENCE = {"last": 4, "mean": 7 / 3, "sum": 7}


@pytest.mark.parametrize("pooling", ["last", "mean", "sum"])
def test_s_rgd_matches_eq_5_6_by_hand(tiny_lm, pooling):
    method = FixedRewards(pooling).eval()
    prompt, response = prompts_of(tiny_lm, ["an article"])[0], [1, 2, 4]
    sequence, step_sums = reward_sums(method, None, ["u"], [prompt], [response])
    assert step_sums[0] == pytest.approx(HAND[pooling])
    assert sequence[0] == pytest.approx(SEQUENCE[pooling])
    with torch.no_grad():
        logits = tiny_lm.model(torch.tensor([prompt + response])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    by_hand_lp = sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(response))
    lp = logprob_sums(tiny_lm, [prompt], [response], batch_size=1)
    assert lp[0] == pytest.approx(by_hand_lp, abs=1e-4)
    assert float(s_rgd(lp, step_sums, 0.5)[0]) == pytest.approx(by_hand_lp + 0.5 * HAND[pooling], abs=1e-4)


def test_genarm_step_sum_is_its_sequence_reward(tiny_lm):
    """Σ_t β log π_arm(y_t|x,y<t) = β log π_arm(y|x): no token counted (T - t + 1) times."""
    method = METHODS.get("genarm")(tiny_lm.model.config.hidden_size, plain_settings("genarm")).eval()
    data = toy_pairs(tiny_lm, 4, 0)
    sequence, step_sums = reward_sums(method, RewardBackbone(tiny_lm, "tiny-eq"), data.users, data.prompts,
                                      data.chosen)
    np.testing.assert_allclose(step_sums, sequence, rtol=1e-5, atol=1e-4)


def test_lambda_curve_scores_with_the_same_s_rgd():
    lp_w, lp_l, r_w, r_l = np.array([-3.0, -1.0]), np.array([-2.0, -2.0]), np.array([2.0, 0.0]), np.array([0.0, 1.0])
    curve = policy_accuracy_curve(lp_w, lp_l, r_w, r_l, [0.0, 1.0, 4.0])
    expected = [100 * np.mean(s_rgd(lp_w, r_w, lam) > s_rgd(lp_l, r_l, lam)) for lam in (0.0, 1.0, 4.0)]
    np.testing.assert_allclose(curve, expected)

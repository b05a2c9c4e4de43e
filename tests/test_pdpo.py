"""P-DPO: the DPO loss by hand, generation with soft tokens, adaptation of one user, LoRA."""

import pytest
import torch

from persalign.core.registry import METHODS
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from persalign.rewards.pdpo import dpo_loss
from tests.method_settings import plain_settings
from tests.test_conformance import opposite_pairs
from tests.test_rewards_args import prompts_of


def pdpo(**settings):
    return METHODS.get("pdpo")(64, plain_settings("pdpo", **{"batch_size": 8, "max_steps": 4, **settings}))


def test_dpo_loss_matches_a_hand_computed_value():
    # row 1: β·((−1 − −1.5) − (−2 − −1.5)) = 0.1  -> log(1 + e^−0.1) = 0.6443967
    # row 2: β·((−3 − −2) − (−1 − −2))   = −0.2 -> log(1 + e^0.2)  = 0.7981389
    loss = dpo_loss(torch.tensor([-1.0, -3.0]), torch.tensor([-2.0, -1.0]), torch.tensor([-1.5, -2.0]),
                    torch.tensor([-1.5, -2.0]), beta=0.1)
    assert float(loss) == pytest.approx((0.6443967 + 0.7981389) / 2, abs=1e-6)


def test_generation_with_soft_tokens_equals_a_step_by_step_full_forward(tiny_lm):
    """The left-padded, cached prefill puts each row's soft tokens right before its own prompt."""
    method = pdpo()
    method.add_user("alice")
    with torch.no_grad():
        method.offsets.normal_(0, 1.0)
        method.generic.normal_(0, 1.0)
    prompts = prompts_of(tiny_lm, ["short", "a much longer article text here"])
    users = ["alice", "someone-unknown"]
    generated = method.generate(tiny_lm, users, prompts, max_new_tokens=5)
    embed = tiny_lm.model.get_input_embeddings()
    for row, (prompt, user) in enumerate(zip(prompts, users)):
        soft = method.soft_tokens(method.user_ids([user]))[0]
        tokens = []
        for _ in generated[row]:
            with torch.no_grad():
                inputs = torch.cat([soft, embed(torch.tensor(prompt + tokens))])[None]
                tokens.append(int(tiny_lm.model(inputs_embeds=inputs).logits[0, -1].argmax()))
        assert tokens == generated[row]


def test_soft_tokens_change_generation_and_unknown_users_get_the_generic_tokens(tiny_lm):
    method = pdpo()
    method.add_user("alice")
    with torch.no_grad():
        method.offsets[1] = torch.randn(method.offsets.shape[1:], generator=torch.Generator().manual_seed(0)) * 3
    prompts = prompts_of(tiny_lm, ["article"] * 2)
    alice, unknown = method.generate(tiny_lm, ["alice", "nobody"], prompts, max_new_tokens=6)
    assert unknown == method.generate(tiny_lm, ["<generic>"], prompts[:1], 6)[0]
    # the user's tokens change what the policy predicts (greedy tokens of a tiny random model may not move)
    with torch.no_grad():
        scores = method.sequence_logprobs(tiny_lm, method.soft_tokens(method.user_ids(["alice", "nobody"])),
                                          prompts, [alice, alice])
    assert abs(float(scores[0] - scores[1])) > 1e-3


def test_adapt_trains_only_the_new_users_offset(tiny_lm):
    method = pdpo()
    data = opposite_pairs(tiny_lm, {"A": ["a1"], "B": ["b1"]}, 6, 0)
    method.fit(tiny_lm, data, None)
    before = method.offsets.detach().clone()
    generic = method.generic.detach().clone()
    weights = {k: v.clone() for k, v in tiny_lm.model.state_dict().items()}
    method.adapt(tiny_lm, "new", opposite_pairs(tiny_lm, {"A": ["new"]}, 4, 1))
    new = method.users["new"]
    assert torch.equal(method.offsets[:new], before[:new]) and torch.equal(method.generic, generic)
    assert method.offsets[new].abs().sum() > 0
    assert all(torch.equal(v, tiny_lm.model.state_dict()[k]) for k, v in weights.items())  # frozen mode


def test_pdpo_lora_training_changes_adapters_and_leaves_base_weights():
    from persalign.rewards.lora import attach_lora

    model, tokenizer = tiny_llama(seed=1)
    lm = attach_lora(LoadedLM("tiny", model, tokenizer, torch.device("cpu")), rank=8, alpha=16)
    base_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" in k}
    method = pdpo(backbone_lr=1e-2)
    method.fit(lm, opposite_pairs(lm, {"A": ["a1"], "B": ["b1"]}, 6, 0), None)
    assert all(torch.equal(v, base_before[k]) for k, v in lm.model.named_parameters() if "lora_" not in k)
    assert any(not torch.equal(v, lora_before[k]) for k, v in lm.model.named_parameters() if "lora_" in k)
    # π_ref is the trained model with its adapter switched off = the untouched base model
    base = LoadedLM("base", tiny_llama(seed=1)[0], tokenizer, torch.device("cpu"))
    data = opposite_pairs(lm, {"A": ["a1"]}, 3, 2)
    from persalign.engine.scoring import response_logprobs

    expected = torch.tensor([float(lp.sum()) for lp in response_logprobs(base, data.prompts, data.chosen)])
    assert torch.allclose(method.reference_logprobs(lm, data.prompts, data.chosen), expected, atol=1e-4)


def test_pairs_back_propagated_a_few_at_a_time_give_the_one_batch_gradient(tiny_lm):
    """Memory fix: micro-batches of 1 and 3 pairs accumulate exactly the gradient of all 8 pairs at once."""
    data = opposite_pairs(tiny_lm, {"A": ["a1", "a2"], "B": ["b1", "b2"]}, 2, 0)  # 8 pairs, 4 users
    grads = []
    for per_backward in (8, 1, 3):
        method = pdpo(seed=0)
        method.pairs_per_backward = per_backward
        for user in sorted(set(data.users)):
            method.add_user(user)
        with torch.no_grad():
            method.offsets.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
        reference = method.reference_logprobs(tiny_lm, data.prompts * 2, data.chosen + data.rejected)
        loss = method._accumulate_gradients(tiny_lm, data, reference[:8], reference[8:], with_generic=True)
        grads.append((loss, method.generic.grad.clone(), method.offsets.grad.clone()))
    (loss, generic, offsets), rest = grads[0], grads[1:]
    assert generic.abs().sum() > 0 and offsets.abs().sum() > 0
    for other_loss, other_generic, other_offsets in rest:
        assert other_loss == pytest.approx(loss, abs=1e-5)
        assert torch.allclose(other_generic, generic, atol=1e-6) and torch.allclose(other_offsets, offsets, atol=1e-6)

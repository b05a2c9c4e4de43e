"""GenARM: token rewards are β·log π_arm(y_t | x, y<t) read from the state before y_t; ARGS equals them; LoRA."""

import torch

from persalign.core.registry import METHODS
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode
from persalign.engine.scoring import response_logprobs
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from persalign.rewards.backbone import RewardBackbone, pad_states
from persalign.rewards.train import evaluate_pairs
from tests.method_settings import plain_settings
from tests.test_rewards_args import prompts_of, toy_pairs


def genarm(hidden, **settings):
    return METHODS.get("genarm")(hidden, plain_settings("genarm", **settings))


def test_untrained_genarm_reward_is_the_base_lm_log_likelihood(tiny_lm):
    """U starts at 0, so r_t = log π_base(y_t | x, y<t): checks the one-token shift of the states."""
    backbone = RewardBackbone(tiny_lm, "tiny-genarm")
    method = genarm(tiny_lm.model.config.hidden_size).eval()
    data = toy_pairs(tiny_lm, 4, 0)
    padded, mask = pad_states(method.features(backbone, data.prompts, data.chosen))
    with torch.no_grad():
        token = method.token_rewards(padded, method.user_ids(data.users))
        prefix = method.prefix_rewards(padded, mask, method.user_ids(data.users))
    expected = response_logprobs(tiny_lm, data.prompts, data.chosen, 4)
    for row, lp in enumerate(expected):
        assert torch.allclose(token[row, : len(lp)], torch.as_tensor(lp, dtype=torch.float32), atol=1e-4)
        assert abs(float(prefix[row, len(lp) - 1]) - float(lp.sum())) < 1e-3  # prefix reward = running sum


def test_genarm_learns_a_toy_preference_and_args_reads_the_same_rewards(tiny_lm):
    backbone = RewardBackbone(tiny_lm, "tiny-genarm")
    method = genarm(tiny_lm.model.config.hidden_size, head_lr=3e-2, epochs=40, patience=40, seed=0)
    method.fit(backbone, toy_pairs(tiny_lm, 24, 0), None)
    assert evaluate_pairs(method.eval(), backbone, toy_pairs(tiny_lm, 20, 1))["accuracy"] >= 90
    prompts = prompts_of(tiny_lm, ["article a", "a much longer article b"])
    copy, _ = tiny_llama(seed=0)  # same weights, another object: the separate-RM path
    separate = LoadedLM("tiny-copy", copy, tiny_lm.tokenizer, tiny_lm.device)
    for guide_lm in (tiny_lm, separate):
        trace = []
        generated = args_decode(tiny_lm, RewardGuide(guide_lm, method, ["u", "u"], lam=2.0, top_k=4), prompts,
                                max_new_tokens=5, record=DecodeRecord(trace=trace))
        for row, prompt in enumerate(prompts):
            for step in range(len(generated[row])):
                candidates, rewards = trace[step]
                for j in range(candidates.shape[1]):
                    response = generated[row][:step] + [int(candidates[row, j])]
                    padded, mask = pad_states(method.features(backbone, [prompt], [response]))
                    with torch.no_grad():
                        expected = method.sequence_rewards(padded, mask, method.user_ids(["u"]))[0]
                    assert abs(float(rewards[row, j]) - float(expected)) <= 1e-4


def test_genarm_lora_training_changes_adapters_and_leaves_base_weights():
    from persalign.rewards.lora import attach_lora

    model, tokenizer = tiny_llama(seed=1)
    lm = attach_lora(LoadedLM("tiny", model, tokenizer, torch.device("cpu")), rank=8, alpha=16)
    base_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" in k}
    backbone = RewardBackbone(lm, "tiny-genarm-lora", trainable=True)
    method = genarm(64, head_lr=1e-2, backbone_lr=1e-2, epochs=2, patience=5)
    method.fit(backbone, toy_pairs(lm, 8, 0), None)
    assert all(torch.equal(v, base_before[k]) for k, v in lm.model.named_parameters() if "lora_" not in k)
    assert any(not torch.equal(v, lora_before[k]) for k, v in lm.model.named_parameters() if "lora_" in k)
    assert "bound" not in str(method.state_dict().keys()) and len(method.state_dict()) == 2  # LM head never saved


def test_chunked_token_rewards_equal_the_full_log_softmax_in_value_and_gradient(tiny_lm):
    """Blocks of 3 tokens (re-computed in backward) give the same rewards and head gradients as one block."""
    backbone = RewardBackbone(tiny_lm, "tiny-genarm")
    method = genarm(tiny_lm.model.config.hidden_size)
    with torch.no_grad():
        method.head.up.normal_(generator=torch.Generator().manual_seed(3))  # a non-trivial ARM
    data = toy_pairs(tiny_lm, 5, 0)
    padded, _ = pad_states(method.features(backbone, data.prompts, data.chosen))
    users = method.user_ids(data.users)
    hidden, tokens = padded[..., :-1], padded[..., -1].long()
    reference = method.head.log_probs(hidden).gather(-1, tokens[..., None]).squeeze(-1)
    reference.sum().backward()
    expected_grads = [p.grad.clone() for p in method.head.parameters()]
    method.head.zero_grad()
    method.head.chunk_tokens = 3
    chunked = method.token_rewards(padded, users)
    chunked.sum().backward()
    assert chunked.shape == tokens.shape and torch.allclose(chunked, reference, atol=1e-5)
    for p, g in zip(method.head.parameters(), expected_grads):
        assert torch.allclose(p.grad, g, atol=1e-4)
    with torch.no_grad():
        assert torch.allclose(method.token_rewards(padded, users), reference, atol=1e-5)


def test_scoring_blocks_are_sized_to_the_vocabulary_and_give_the_same_floats():
    """Without a gradient a block holds at most `scoring_logits` logits (at SmolLM2's 49,152-token vocabulary 341
    tokens, not 1,024: ~400 MB of a GenARM cell's peak); each row is computed as in one large block, so every
    score is the same float. Training keeps its 1,024-token blocks (its gradients are summed block by block)."""
    from torch import nn

    method = genarm(64)
    generator = torch.Generator().manual_seed(5)
    head = nn.Linear(64, 49_152, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) / 8)
        method.head.up.normal_(generator=generator)
    method.head.bound = (head,)
    hidden = torch.randn(2, 500, 64, generator=generator)
    tokens = torch.randint(0, 49_152, (2, 500, 1), generator=generator).float()
    features, users = torch.cat([hidden, tokens], dim=-1), torch.zeros(2, dtype=torch.long)
    assert method.head.block_tokens() == 1024  # gradients on: training's blocks
    with torch.no_grad():
        assert method.head.block_tokens() == 2 ** 24 // 49_152 == 341
        blocked = method.token_rewards(features, users)
        method.head.scoring_logits = 2 ** 40  # one 1,000-token block
        whole = method.token_rewards(features, users)
    assert torch.equal(blocked, whole)

"""Reward interface and ARGS: one-pass prefix rewards, candidate = teacher-forced, invariances, toy learning."""

import numpy as np
import pytest
import torch

from persalign.core.errors import ConfigError
from persalign.core.prompts import PromptFormatter
from persalign.core.registry import METHODS
from persalign.decoders.args_decoding import DecodeRecord, RewardGuide, args_decode
from persalign.engine.decoding import decode, greedy
from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama
from persalign.rewards.backbone import RewardBackbone, pad_states
from persalign.rewards.train import PairData
from tests.method_settings import plain_settings


def random_method(name, hidden, seed=0):
    method = METHODS.get(name)(hidden, plain_settings(name, seed=seed))
    with torch.no_grad():
        for p in method.parameters():
            p.normal_(0, 0.5)
    return method.eval()


def prompts_of(lm, texts):
    formatter = PromptFormatter(lm.tokenizer, "headline")
    return [formatter.prompt_ids(t) for t in texts]


def prefix_reward_recomputed(backbone, method, prompt, response, user="u"):
    """The reward of each prefix y<=t by a separate forward over prompt + y<=t."""
    values = []
    for t in range(1, len(response) + 1):
        states = backbone.states([prompt], [response[:t]])
        padded, mask = pad_states(states)
        with torch.no_grad():
            values.append(float(method.sequence_rewards(padded, mask, method.user_ids([user]))[0]))
    return np.array(values)


@pytest.mark.parametrize("name", ["global_rm", "global_rm_v2"])
def test_one_pass_prefix_rewards_equal_recomputing_each_prefix(tiny_lm, name):
    backbone = RewardBackbone(tiny_lm, "tiny")
    method = random_method(name, tiny_lm.model.config.hidden_size)
    prompt = prompts_of(tiny_lm, ["an article"])[0]
    response = tiny_lm.tokenizer.encode("A headline here", add_special_tokens=False)
    padded, mask = pad_states(backbone.states([prompt], [response]))
    with torch.no_grad():
        one_pass = method.prefix_rewards(padded, mask, method.user_ids(["u"]))[0].numpy()
    np.testing.assert_allclose(one_pass, prefix_reward_recomputed(backbone, method, prompt, response), atol=1e-4)


@pytest.mark.parametrize("name", ["global_rm", "global_rm_v2"])
@pytest.mark.parametrize("shared", [True, False])
def test_args_candidate_rewards_equal_teacher_forced_prefix_rewards(tiny_lm, name, shared):
    method = random_method(name, tiny_lm.model.config.hidden_size)
    if shared:
        rm_lm = tiny_lm
    else:
        model, tokenizer = tiny_llama(seed=7)  # a different RM backbone with the same tokenizer
        rm_lm = LoadedLM("rm", model, tiny_lm.tokenizer, torch.device("cpu"))
    backbone = RewardBackbone(rm_lm, "rm")
    prompts = prompts_of(tiny_lm, ["short", "a considerably longer article text"])
    trace = []
    generated = args_decode(tiny_lm, RewardGuide(rm_lm, method, ["u", "u"], lam=1.0, top_k=4), prompts,
                            max_new_tokens=5, record=DecodeRecord(trace=trace))
    checked = 0
    for row, prompt in enumerate(prompts):
        for step, (candidates, rewards) in enumerate(trace):
            if step > len(generated[row]) - 1:
                break
            prefix = generated[row][:step]
            for j in range(candidates.shape[1]):
                response = prefix + [int(candidates[row, j])]
                expected = prefix_reward_recomputed(backbone, method, prompt, response)[-1]
                assert abs(float(rewards[row, j]) - expected) <= 1e-4
                checked += 1
    assert checked >= 8


def test_args_with_zero_lambda_is_greedy(tiny_lm):
    method = random_method("global_rm", tiny_lm.model.config.hidden_size)
    prompts = prompts_of(tiny_lm, ["one", "two words", "three is longer"])
    guided = args_decode(tiny_lm, RewardGuide(tiny_lm, method, ["u"] * 3, lam=0.0, top_k=5), prompts, max_new_tokens=6)
    assert guided == decode(tiny_lm, prompts, greedy, 6)


def test_args_rows_are_independent_of_batching(tiny_lm):
    method = random_method("global_rm_v2", tiny_lm.model.config.hidden_size)
    prompts = prompts_of(tiny_lm, ["one", "two words here", "three is a longer prompt"])
    guide = RewardGuide(tiny_lm, method, ["u"] * 3, lam=2.0, top_k=5)
    batched = args_decode(tiny_lm, guide, prompts, max_new_tokens=6)
    alone = [args_decode(tiny_lm, RewardGuide(tiny_lm, method, ["u"], lam=2.0, top_k=5), [p], max_new_tokens=6)[0]
             for p in prompts]
    assert batched == alone


def test_rewards_do_not_depend_on_batch_size_padding_side_or_pad_eos(tiny_lm):
    method = random_method("global_rm", tiny_lm.model.config.hidden_size)
    backbone = RewardBackbone(tiny_lm, "tiny")
    prompts = prompts_of(tiny_lm, ["a", "a much longer article here"] * 4)
    responses = [tiny_lm.tokenizer.encode(t, add_special_tokens=False) for t in ["Head", "A longer headline"] * 4]
    users = method.user_ids(["u"] * 8)

    def rewards(states):
        padded, mask = pad_states(states)
        return method.sequence_rewards(padded, mask, users).detach().numpy()

    batch8 = rewards(backbone._forward(prompts, responses, batch_size=8))
    batch1 = rewards(backbone._forward(prompts, responses, batch_size=1))
    np.testing.assert_allclose(batch8, batch1, atol=1e-4)
    # Left padding (as in generation) gives the same states as right padding (as in scoring).
    from persalign.engine.decoding import left_pad

    ids, mask, pos = left_pad([p + r for p, r in zip(prompts, responses)], tiny_lm.tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        hidden = tiny_lm.model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
    left = [hidden[i, ids.shape[1] - len(r):] for i, r in enumerate(responses)]
    np.testing.assert_allclose(rewards(left), batch8, atol=1e-4)
    original = tiny_lm.tokenizer.pad_token
    tiny_lm.tokenizer.pad_token = tiny_lm.tokenizer.eos_token
    try:
        np.testing.assert_allclose(rewards(backbone._forward(prompts, responses, 8)), batch8, atol=1e-4)
    finally:
        tiny_lm.tokenizer.pad_token = original


def test_last_token_is_found_from_the_mask_not_the_pad_id(tiny_lm):
    method = random_method("global_rm", tiny_lm.model.config.hidden_size)
    eos = tiny_lm.tokenizer.eos_token_id
    states = [torch.randn(3, tiny_lm.model.config.hidden_size), torch.randn(5, tiny_lm.model.config.hidden_size)]
    padded, mask = pad_states(states)
    rewards = method.sequence_rewards(padded, mask, method.user_ids(["u", "u"]))
    for row, s in enumerate(states):
        expected = method.token_rewards(s[None], method.user_ids(["u"]))[0, -1]
        assert rewards[row].item() == pytest.approx(expected.item(), abs=1e-5)
    assert eos is not None


def test_different_tokenizers_are_refused(tiny_lm):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    other = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")),
                                    pad_token="<unk>")
    rm_lm = LoadedLM("other", tiny_lm.model, other, torch.device("cpu"))
    method = random_method("global_rm", tiny_lm.model.config.hidden_size)
    with pytest.raises(ConfigError, match="share a tokenizer"):
        args_decode(tiny_lm, RewardGuide(rm_lm, method, ["u"], lam=1.0, top_k=3), prompts_of(tiny_lm, ["x"]), 2)


# --- learning on a toy preference ------------------------------------------------------------------

def toy_pairs(lm, n, seed):
    """Chosen responses end with '!', rejected ones do not (same words otherwise)."""
    rng = np.random.default_rng(seed)
    words = ["red", "blue", "cat", "dog", "sun", "rain", "big", "small", "fast", "slow"]
    formatter = PromptFormatter(lm.tokenizer, "headline")
    users, prompts, chosen, rejected = [], [], [], []
    for i in range(n):
        text = " ".join(rng.choice(words, size=3))
        users.append(f"user{i % 3}")
        prompts.append(formatter.prompt_ids(f"article {i}"))
        chosen.append(formatter.response_ids(text + "!"))
        rejected.append(formatter.response_ids(text + "."))
    return PairData(users, prompts, chosen, rejected)


def test_global_rm_learns_a_toy_preference_and_args_follows_it(tiny_lm):
    from persalign.rewards.train import evaluate_pairs

    backbone = RewardBackbone(tiny_lm, "tiny")
    method = METHODS.get("global_rm")(tiny_lm.model.config.hidden_size,
                                      plain_settings("global_rm", head_lr=3e-2, epochs=60, patience=60))
    log = method.fit(backbone, toy_pairs(tiny_lm, 60, 0), toy_pairs(tiny_lm, 20, 1))
    assert evaluate_pairs(method, backbone, toy_pairs(tiny_lm, 40, 2))["accuracy"] >= 90
    assert log.steps > 0
    bang = tiny_lm.tokenizer.encode("!", add_special_tokens=False)[0]
    prompts = prompts_of(tiny_lm, [f"query {i}" for i in range(6)])
    vocab = tiny_lm.model.config.vocab_size
    guided = args_decode(tiny_lm, RewardGuide(tiny_lm, method, ["u"] * 6, lam=50.0, top_k=vocab), prompts,
                         max_new_tokens=6)
    plain = decode(tiny_lm, prompts, greedy, 6)
    count = lambda rows: sum(row.count(bang) for row in rows)  # noqa: E731
    assert count(guided) > count(plain) + 6


def test_lora_training_changes_adapters_and_leaves_base_weights(tmp_path):
    from persalign.rewards.lora import attach_lora

    model, tokenizer = tiny_llama(seed=1)
    lm = attach_lora(LoadedLM("tiny", model, tokenizer, torch.device("cpu")), rank=8, alpha=16)
    base_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in lm.model.named_parameters() if "lora_" in k}
    assert lora_before and all(not v.requires_grad for k, v in lm.model.named_parameters() if "lora_" not in k)
    backbone = RewardBackbone(lm, "tiny-lora", trainable=True)
    method = METHODS.get("global_rm")(64, plain_settings("global_rm", head_lr=1e-2, backbone_lr=1e-2, epochs=2, patience=5))
    method.fit(backbone, toy_pairs(lm, 8, 0), None)
    for k, v in lm.model.named_parameters():
        if "lora_" in k:
            continue
        assert torch.equal(v, base_before[k]), k
    changed = [k for k, v in lm.model.named_parameters() if "lora_" in k and not torch.equal(v, lora_before[k])]
    assert changed


@pytest.mark.parametrize("name", ["global_rm", "global_rm_v2"])
def test_save_and_load_give_identical_rewards_without_pickle(tiny_lm, tmp_path, name):
    method = random_method(name, tiny_lm.model.config.hidden_size)
    method.add_user("alice")
    method.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["head.json", "head.safetensors"]
    loaded = METHODS.get(name).load(tmp_path / "m")
    states = torch.randn(2, 5, tiny_lm.model.config.hidden_size)
    mask = torch.ones(2, 5, dtype=torch.bool)
    users = method.user_ids(["alice", "bob"])
    with torch.no_grad():
        assert torch.equal(method.prefix_rewards(states, mask, users), loaded.prefix_rewards(states, mask, users))
    assert loaded.users == method.users


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_tree_forward_candidates_see_only_the_prefix_and_themselves(implementation):
    """Each candidate's state equals a separate teacher-forced forward of prefix + that candidate."""
    from persalign.decoders.args_decoding import tree_forward
    from persalign.engine.decoding import left_pad
    from persalign.models.loading import decoder_stack

    model, tokenizer = tiny_llama(seed=3)
    model.set_attn_implementation(implementation)
    stack = decoder_stack(model)
    prompts = [tokenizer.encode("a short prefix", add_special_tokens=False),
               tokenizer.encode("another, longer prefix here", add_special_tokens=False)]
    ids, mask, positions = left_pad(prompts, tokenizer.pad_token_id, "cpu")
    candidates = torch.tensor([[5, 9, 17, 33], [40, 41, 42, 43]])
    with torch.no_grad():
        cache = stack(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True).past_key_values
        states = tree_forward(stack, cache, mask, positions[:, -1] + 1, candidates)
        for row, prompt in enumerate(prompts):
            for j, token in enumerate(candidates[row].tolist()):
                alone = stack(input_ids=torch.tensor([prompt + [token]])).last_hidden_state[0, -1]
                assert torch.allclose(states[row, j], alone, atol=1e-4), (implementation, row, j)


@pytest.mark.parametrize("kind", ["tree, shared backbone", "tree, separate RM", "token-level (GenARM)"])
def test_a_batch_decoded_again_reuses_its_prompt_prefill_and_decodes_the_same(tiny_lm, monkeypatch, kind):
    """Issue #19: the λ choice decodes the same validation batch for every method, seed and λ; with a
    shared `prefills` memo the policy prefills that batch once (before: once per decode), and every
    decode is the same as with a prefill of its own."""
    hidden = tiny_lm.model.config.hidden_size
    name = "genarm" if kind.startswith("token") else "global_rm"
    methods = [random_method(name, hidden, seed=0), random_method(name, hidden, seed=1)]
    rm_lm = tiny_lm
    if kind == "tree, separate RM":
        rm_lm = LoadedLM("rm", tiny_llama(seed=7)[0], tiny_lm.tokenizer, torch.device("cpu"))
    prompts = prompts_of(tiny_lm, ["one", "two words here", "three is a longer prompt"])
    stack, prefills = tiny_lm.model.model, []
    real_forward = stack.forward
    monkeypatch.setattr(stack, "forward", lambda *a, **kw: (prefills.append(1) if kw.get("past_key_values") is None
                                                            else None) or real_forward(*a, **kw))

    def decode_all(memo):
        del prefills[:]
        outputs = [args_decode(tiny_lm, RewardGuide(rm_lm, method, ["u"] * 3, lam=lam, top_k=4, prefills=memo),
                               prompts, max_new_tokens=5) for method in methods for lam in (0.5, 3.0)]
        return outputs, len(prefills)

    alone, alone_prefills = decode_all(None)
    shared, shared_prefills = decode_all({})
    assert shared == alone
    assert (alone_prefills, shared_prefills) == (4, 1)


def test_args_candidates_are_the_tokenizers_ids_when_the_policy_head_is_padded(tiny_lm):
    """The paper's scales share one RM backbone (0.5B: 151,936 rows) with policies whose heads are padded
    further (7B: 152,064). Fails before: a padded id among the candidates, an IndexError in the RM backbone."""
    model, _ = tiny_llama(seed=5, padded_rows=64)
    policy = LoadedLM("padded", model, tiny_lm.tokenizer, torch.device("cpu"))
    method = random_method("global_rm", tiny_lm.model.config.hidden_size)
    trace = []
    vocab = len(tiny_lm.tokenizer)
    args_decode(policy, RewardGuide(tiny_lm, method, ["u", "u"], lam=1.0, top_k=vocab - 8),
                prompts_of(tiny_lm, ["short", "a longer article"]), max_new_tokens=3, record=DecodeRecord(trace=trace))
    assert trace and all(int(candidates.max()) < vocab for candidates, _ in trace)

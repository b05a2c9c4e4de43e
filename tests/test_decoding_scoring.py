"""The decode loop and teacher-forced scoring on a tiny random Llama built in code."""

import numpy as np
import pytest
import torch

from persalign.core.prompts import PromptFormatter
from persalign.core.records import UserItem
from persalign.engine.decoding import decode, generate_texts, greedy
from persalign.engine.scoring import mean_logprob, response_logprobs


def prompts_for(lm, texts):
    formatter = PromptFormatter(lm.tokenizer, "headline")
    return [formatter.prompt_ids(t) for t in texts]


def test_greedy_matches_transformers_generate_row_by_row(tiny_lm):
    prompts = prompts_for(tiny_lm, ["short", "a much longer article about many things"])
    ours = decode(tiny_lm, prompts, greedy, max_new_tokens=6)
    assert any(len(g) == 6 for g in ours)  # the comparison is not vacuous
    for prompt, generated in zip(prompts, ours):
        ids = torch.tensor([prompt])
        reference = tiny_lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                           do_sample=False, pad_token_id=tiny_lm.tokenizer.pad_token_id)
        expected = reference[0, len(prompt):].tolist()
        stops = set(tiny_lm.tokenizer.all_special_ids)
        cut = next((i for i, t in enumerate(expected) if t in stops), len(expected))
        assert generated == expected[: len(generated)] and len(generated) <= cut


def test_generation_does_not_depend_on_batch_composition(tiny_lm):
    prompts = prompts_for(tiny_lm, ["one", "two words here", "three is a longer prompt than the others"])
    batched = decode(tiny_lm, prompts, greedy, max_new_tokens=8)
    alone = [decode(tiny_lm, [p], greedy, max_new_tokens=8)[0] for p in prompts]
    assert batched == alone


def test_rows_stop_at_newline_once_they_have_text(tiny_lm):
    tokenizer = tiny_lm.tokenizer
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    letter = tokenizer.encode("a", add_special_tokens=False)[0]
    script = [newline, letter, letter, newline, letter]  # leading blank line skipped, then "aa", then stop

    def scripted(logprobs, step):
        return torch.full((logprobs.shape[0],), script[step])

    generated = decode(tiny_lm, prompts_for(tiny_lm, ["x", "yy"]), scripted, max_new_tokens=5)
    assert generated == [[newline, letter, letter]] * 2
    assert generate_texts(tiny_lm, prompts_for(tiny_lm, ["x"]), 5, scripted) == ["aa"]


def manual_logprobs(lm, prompt, response):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = lm.model(ids).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return np.array([logp[len(prompt) + t - 1, tok].item() for t, tok in enumerate(response)])


def test_response_logprobs_match_full_forward_and_are_batch_invariant(tiny_lm):
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids("article one"), formatter.prompt_ids("a longer second article text")] * 4
    responses = [formatter.response_ids(t) for t in ["Headline A", "b", "Third headline here", "x y"] * 2]
    batched = response_logprobs(tiny_lm, prompts, responses, batch_size=8)
    single = response_logprobs(tiny_lm, prompts, responses, batch_size=1)
    for p, r, b, s in zip(prompts, responses, batched, single):
        expected = manual_logprobs(tiny_lm, p, r)
        np.testing.assert_allclose(b, expected, atol=1e-4)
        np.testing.assert_allclose(s, expected, atol=1e-4)


def test_scores_do_not_change_when_pad_equals_eos(tiny_lm):
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids("article"), formatter.prompt_ids("a much longer article text")]
    responses = [formatter.response_ids("Headline"), formatter.response_ids("h")]
    before = response_logprobs(tiny_lm, prompts, responses)
    original = tiny_lm.tokenizer.pad_token
    tiny_lm.tokenizer.pad_token = tiny_lm.tokenizer.eos_token
    try:
        after = response_logprobs(tiny_lm, prompts, responses)
        gen_after = decode(tiny_lm, prompts, greedy, 6)
    finally:
        tiny_lm.tokenizer.pad_token = original
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert gen_after == decode(tiny_lm, prompts, greedy, 6)


def test_mean_logprob_is_length_normalised():
    assert mean_logprob(np.array([-1.0, -3.0])) == pytest.approx(-2.0)
    assert mean_logprob(np.array([])) == float("-inf")


def test_icl_prompt_only_adds_demonstrations(tiny_lm, tiny_plain_lm):
    demos = [UserItem("d1", "u", "earlier article", "Earlier Headline")]
    for lm in (tiny_lm, tiny_plain_lm):
        formatter = PromptFormatter(lm.tokenizer, "headline")
        zero, icl = formatter.prompt_ids("query article"), formatter.prompt_ids("query article", demos)
        text = lm.tokenizer.decode(icl)
        assert len(icl) > len(zero) and "Earlier Headline" in text and "query article" in text
        assert lm.tokenizer.decode(zero) in text or lm.tokenizer.decode(zero).split("\n")[-1] in text


def test_prompt_budget_drops_demonstrations_never_the_query(tiny_lm):
    demos = [UserItem(f"d{i}", "u", "article " * 20, f"Headline {i}") for i in range(5)]
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline", max_prompt_tokens=600)
    ids = formatter.prompt_ids("the query", demos)
    text = tiny_lm.tokenizer.decode(ids)
    assert len(ids) <= 600 and "the query" in text and "Headline 0" in text and "Headline 4" not in text


def test_scoring_from_the_generation_prefill_equals_a_fresh_forward(tiny_lm):
    from persalign.engine.decoding import decode_from, prefill
    from persalign.engine.scoring import logprobs_from_prefill

    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids(t) for t in ["one", "a much longer article text", "mid size"]]
    chosen = [formatter.response_ids(t) for t in ["Headline A", "b", "Third one"]]
    rejected = [formatter.response_ids(t) for t in ["Other", "longer rejected text", ""]]
    state = prefill(tiny_lm, prompts)
    generated = decode_from(tiny_lm, state, greedy, 7)
    assert generated == decode(tiny_lm, prompts, greedy, 7)
    got_chosen, got_rejected = logprobs_from_prefill(tiny_lm, state, [chosen, rejected])
    for p, r, got in zip(prompts * 2, chosen + rejected, got_chosen + got_rejected):
        if r:
            np.testing.assert_allclose(got, manual_logprobs(tiny_lm, p, r), atol=1e-4)
        else:
            assert len(got) == 0

"""Best-of-N: picks the argmax, nested N are prefixes of one sample set, sampling is seeded."""

from persalign.core.prompts import PromptFormatter
from persalign.decoders.best_of_n_samples import nested_best, sample_keys, sample_responses, sampler


def test_nested_best_picks_the_argmax_among_the_first_n():
    scores = [[0.1, 0.9, 0.3, 0.95], [2.0, 1.0, 3.0, 0.0]]
    picks = nested_best(scores, [1, 2, 4])
    assert picks == {1: [0, 0], 2: [1, 0], 4: [3, 2]}


def test_samples_are_seeded_and_smaller_sets_are_prefixes(tiny_lm):
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    prompts = [formatter.prompt_ids("first article"), formatter.prompt_ids("second")]
    keys = sample_keys(["first", "second"], 4)
    a = sample_responses(tiny_lm, prompts, 4, 6, sampler(0, keys))
    b = sample_responses(tiny_lm, prompts, 4, 6, sampler(0, keys))
    c = sample_responses(tiny_lm, prompts, 4, 6, sampler(1, keys))
    assert a == b and a != c
    assert len(a) == 2 and all(len(row) == 4 for row in a)
    assert len({t for row in a for t in row}) > 2  # they are samples, not copies of greedy
    alone = sample_responses(tiny_lm, prompts[1:], 4, 6, sampler(0, keys[4:]))
    assert alone == a[1:]  # a prompt's samples do not depend on the prompts drawn beside it
    scores = [[len(t) for t in row] for row in a]
    best = nested_best(scores, [1, 2, 4])
    for n, picks in best.items():
        for row, pick in zip(scores, picks):
            assert pick < n and row[pick] == max(row[:n])

"""The pairwise judge (issue #41, point 1, its core): both orders asked, position bias counted, unparseable
answers invalid (never a tie), several judges combined by majority; and a causal LM through the engine."""

import pytest

from persalign.metrics.judge import JudgeTally, judge_pairs, majority, parse_choice


@pytest.mark.parametrize("answer, choice", [("A", "A"), (" b.", "B"), ("Tie", "tie"), ("Response B", "B"),
                                            ("**A** because", "A"), ("I cannot say", None), ("", None),
                                            ("Both", None), ("Absolutely", None)])
def test_answers_are_parsed_or_counted_invalid(answer, choice):
    assert parse_choice(answer) == choice


def scripted(answers):
    """A judge that answers from a script, checking it is asked in both orders."""
    def generate(prompts):
        assert len(prompts) == len(answers)
        return answers
    return generate


def test_both_orders_agreeing_give_wins_losses_and_ties():
    # the answers with each candidate as A (items 1-3), then as B (items 1-3): A then B = a win both times
    tally = judge_pairs(scripted(["A", "B", "tie", "B", "A", "tie"]), ["ctx"] * 3, ["q"] * 3, ["c1", "c2", "c3"],
                        ["r1", "r2", "r3"])
    assert (tally.wins, tally.losses, tally.ties, tally.position_bias, tally.invalid) == (1, 1, 1, 0, 0)
    assert tally.win_rate == pytest.approx(50.0) and tally.outcomes == ["win", "loss", "tie"]


def test_orders_that_disagree_are_position_bias():
    """'A' whichever output stands first: the judge prefers a position, not an output."""
    tally = judge_pairs(scripted(["A", "B", "A", "B"]), ["ctx"] * 2, ["q"] * 2, ["c1", "c2"], ["r1", "r2"])
    assert tally.position_bias == 2 and tally.ties == 2 and tally.wins == tally.losses == 0


def test_an_unparseable_answer_is_invalid_not_a_tie():
    tally = judge_pairs(scripted(["no idea", "A", "A", "B"]), ["ctx"] * 2, ["q"] * 2, ["c1", "c2"], ["r1", "r2"])
    assert tally.invalid == 1 and tally.outcomes == [None, "win"] and tally.ties == 0
    assert tally.win_rate == pytest.approx(100.0)  # over the validly judged item only
    assert JudgeTally().win_rate is None


def test_several_judges_combine_by_majority():
    votes = [JudgeTally(outcomes=["win", "loss", None, "win"]), JudgeTally(outcomes=["win", "win", None, "loss"]),
             JudgeTally(outcomes=["loss", "win", None, None])]
    assert majority(votes) == ["win", "win", None, "tie"]


def test_a_causal_lm_judges_through_the_generation_engine():
    from persalign.metrics.judge import lm_judge
    from persalign.models.loading import load_causal_lm

    lm = load_causal_lm("tiny-llama")
    tally = judge_pairs(lm_judge(lm), ["writes short headlines"], ["an article"], ["Short one"], ["A long headline"])
    assert tally.judged + tally.invalid == 1  # a random model answers something: parsed or counted invalid

"""A pairwise judge: which of two outputs fits this user better, asked in both orders.

Personalized RewardBench judges downstream quality against each user's rubric (`rubric_aspects`,
never shown to a reward model); on writing data the judge reads the user's own earlier texts. The
judge is not the reward model that guided the output, so its win rate is not circular. Each pair is
asked twice, (x, y) and (y, x): answers that agree give a win, a loss or a tie; answers that name
the same position both times are position bias (counted, and a tie); an answer that cannot be
parsed is counted as invalid, never silently a tie. Several judges (or prompts) combine by majority.

The judge is any text generator `prompts -> answers`: a causal LM through the one generation engine
(`lm_judge`), or a served model behind an OpenAI-compatible endpoint (`endpoint_judge`).

    python -c "from persalign.metrics.judge import parse_choice; print(parse_choice('B.'))"
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

Generator = Callable[[list[str]], list[str]]
ANSWER = re.compile(r"^\W*(?:response\s+)?(A|B|tie)\b", re.IGNORECASE)
INSTRUCTION = ("You judge which of two responses fits one particular user better. What we know of the user:\n"
               "{context}\n\nTask input: {query}\n\nResponse A: {first}\n\nResponse B: {second}\n\n"
               "Which response fits this user better? Answer with exactly one word: A, B, or tie.")


def parse_choice(answer: str) -> str | None:
    """'A', 'B' or 'tie' from the start of a judge's answer; None when it says none of them."""
    match = ANSWER.match(answer or "")
    if not match:
        return None
    choice = match.group(1)
    return "tie" if choice.lower() == "tie" else choice.upper()


@dataclass
class JudgeTally:
    """Outcomes of `candidate` against `reference` over items, with the judge's own failures counted."""

    wins: int = 0
    losses: int = 0
    ties: int = 0
    position_bias: int = 0  # both orders named the same position (counted as a tie as well)
    invalid: int = 0  # at least one of the two answers could not be parsed (not a tie)
    outcomes: list = field(default_factory=list)  # per item: "win", "loss", "tie" or None (invalid)
    biased: list = field(default_factory=list)  # per item: whether both orders named the same position

    @property
    def judged(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def win_rate(self) -> float | None:
        """Wins plus half the ties, over the validly judged items (×100); None when none was."""
        return None if not self.judged else 100.0 * (self.wins + 0.5 * self.ties) / self.judged


def _outcome(first_order: str | None, second_order: str | None) -> tuple[str | None, bool]:
    """(outcome for the candidate, position bias) from the answers with the candidate as A, then as B."""
    if first_order is None or second_order is None:
        return None, False
    if first_order == "tie" and second_order == "tie":
        return "tie", False
    candidate_first = {"A": "win", "B": "loss"}.get(first_order, "tie")
    candidate_second = {"B": "win", "A": "loss"}.get(second_order, "tie")
    if candidate_first == candidate_second:
        return candidate_first, False
    biased = first_order == second_order and first_order != "tie"
    return "tie", biased


TALLY_FIELDS = {"win": "wins", "loss": "losses", "tie": "ties"}


def judge_pairs(generate: Generator, contexts: list[str], queries: list[str], candidates: list[str],
                references: list[str]) -> JudgeTally:
    """Each candidate against its reference, in both orders, in one call of the generator."""
    prompts = [INSTRUCTION.format(context=c, query=q, first=a, second=b)
               for c, q, a, b in zip(contexts, queries, candidates, references)]
    prompts += [INSTRUCTION.format(context=c, query=q, first=b, second=a)
                for c, q, a, b in zip(contexts, queries, candidates, references)]
    answers = [parse_choice(text) for text in generate(prompts)]
    n, tally = len(candidates), JudgeTally()
    for first, second in zip(answers[:n], answers[n:]):
        outcome, biased = _outcome(first, second)
        tally.outcomes.append(outcome)
        tally.biased.append(biased)
        tally.position_bias += biased
        counter = TALLY_FIELDS.get(outcome, "invalid")
        setattr(tally, counter, getattr(tally, counter) + 1)
    return tally


def majority(tallies: list[JudgeTally]) -> list[str | None]:
    """Per item, the outcome most judges gave among their valid ones (a tie between outcomes is a tie;
    no valid outcome is invalid)."""
    combined = []
    for outcomes in zip(*(t.outcomes for t in tallies)):
        votes = Counter(o for o in outcomes if o is not None).most_common()
        if not votes:
            combined.append(None)
        elif len(votes) > 1 and votes[0][1] == votes[1][1]:
            combined.append("tie")
        else:
            combined.append(votes[0][0])
    return combined


class LMJudge:
    """A causal LM (persalign.models.loading.load_causal_lm) as the judge, through the one generation engine:
    greedy, its chat template applied where it has one. `tokens` holds (prompt tokens, answer tokens) of each
    prompt of the last call, for its counted work."""

    def __init__(self, lm, max_new_tokens: int = 4):
        self.lm, self.max_new_tokens = lm, max_new_tokens
        self.tokens: list[tuple[int, int]] = []

    def _ids(self, prompt: str) -> list[int]:
        tokenizer = self.lm.tokenizer
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in newer versions
        return list(tokenizer(prompt + "\nAnswer:")["input_ids"])

    def __call__(self, prompts: list[str]) -> list[str]:
        from persalign.engine.decoding import clean_generation, decode, greedy

        ids = [self._ids(p) for p in prompts]
        answers = decode(self.lm, ids, greedy, self.max_new_tokens)
        self.tokens = [(len(i), len(a)) for i, a in zip(ids, answers)]
        return [clean_generation(self.lm.tokenizer, a) for a in answers]


def lm_judge(lm, max_new_tokens: int = 4) -> Generator:
    """`LMJudge` of a loaded causal LM."""
    return LMJudge(lm, max_new_tokens)


def answer_text(response) -> str:
    """The text of a chat completion, "" for a malformed one (no choices, no message, not a completion at all:
    an HTML page answered with 200): the pair's answer is then unparseable, counted as invalid."""
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, KeyError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def endpoint_judge(base_url: str, model: str, api_key: str = "none", max_tokens: int = 4, timeout_s: float = 60.0,
                   retries: int = 2) -> Generator:
    """A model served behind an OpenAI-compatible endpoint (vLLM, `transformers serve`, …) as the judge.
    The endpoint is asked for its models first: one that cannot be reached — or does not answer within
    `timeout_s`, `retries` times more — is refused in one line before any cell is judged (the client's own
    default waited 600 s × 3)."""
    from persalign.core.errors import ConfigError

    try:
        import httpx
        import openai
    except ImportError:
        raise ConfigError("an endpoint judge needs the openai client: pip install openai") from None
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=retries)
    wait = f"no answer within {timeout_s:g} s × {retries + 1} tries (judge.timeout_s, judge.retries)"
    try:
        client.models.list()
    except openai.APIStatusError:
        pass  # it answered: some servers (transformers serve, offline) cannot list their models
    except (openai.OpenAIError, ValueError, httpx.InvalidURL) as error:  # the config check refuses most bad URLs
        why = wait if isinstance(error, openai.APITimeoutError) else f"{type(error).__name__}: {error}"
        raise ConfigError(f"judge.endpoint {base_url}: {why}; start the server or fix the URL "
                          "(judge.endpoint=http://HOST:PORT/v1)") from None
    except (AttributeError, KeyError, TypeError):  # the client could not parse the answer (an HTML page, …)
        raise ConfigError(f"judge.endpoint {base_url}: its answer to GET /models is not the OpenAI API's; is this "
                          "the server's /v1 base URL?") from None

    def ask(prompt: str) -> str:
        try:
            return answer_text(client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=max_tokens))
        except openai.OpenAIError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError):  # the client could not parse it (HTML with 200)
            return ""

    def generate(prompts: list[str]) -> list[str]:
        try:
            return [ask(p) for p in prompts]
        except openai.OpenAIError as error:
            why = wait if isinstance(error, openai.APITimeoutError) else f"{type(error).__name__}: {error}"
            raise ConfigError(f"judge.endpoint {base_url} ({model}): {why}; finished cells are kept, re-run the "
                              "same command to resume") from None

    return generate

"""Best-of-N samples (Personalized RewardBench's downstream test): drawn once, shared by every method.

Sample N_max responses per prompt from the policy (temperature sampling,
seeded), score each with the user's reward model, and for every N in the
nested set {1, 2, 4, ..., N_max} keep the best of the FIRST N samples: all
N share one sample set, as the benchmark does, so quality-vs-N curves are
not confounded by resampling. The samples of each query prompt are drawn
ONCE per policy × seed (seeded, stored in RUN_DIR/samples/POLICY/seed-N.jsonl
with their ROUGE / BERTScore against the user's text when there is one) and
reused by every method. Each sample row has its own generator, seeded by
(seed, query id, sample index), and samples are drawn in fixed groups of query
items (`draws`: the run's examples in data order, FIXED_GROUP at a time), never
in the evaluator's batches: a sampled text then depends on neither the batch
size nor how a cell is batched (the token budget, another deployment's prompts).

    python -c "from persalign.decoders.best_of_n_samples import nested_best as b; print(b([[.1, .9, .3]], [1, 2]))"
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import torch

from persalign.core.files import set_aside, short, write_atomic
from persalign.engine.decoding import clean_generation, decode
from persalign.engine.work_meter import shared_work
from persalign.metrics.generation import score_generations


def sampler(seed: int, keys: list[str], temperature: float = 1.0):
    """A chooser that samples row i from softmax(logprobs / T) with a generator fixed by (seed, keys[i]):
    a row's tokens do not depend on which other rows share its batch."""
    generators = []
    for key in keys:
        digest = int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:12], 16)
        generators.append(torch.Generator().manual_seed(seed * 1_000_003 + digest))

    def choose(logprobs: torch.Tensor, step: int) -> torch.Tensor:
        probs = torch.softmax(logprobs.float().cpu() / max(temperature, 1e-6), dim=-1)
        picks = [torch.multinomial(row, 1, generator=g) for row, g in zip(probs, generators)]
        return torch.cat(picks).to(logprobs.device)

    return choose


def sample_keys(example_ids: list[str], n: int) -> list[str]:
    """One generator key per sample row, prompt-major as `sample_responses` lays them out."""
    return [f"{example_id}#{k}" for example_id in example_ids for k in range(n)]


def sample_responses(policy, prompts: list[list[int]], n: int, max_new_tokens: int, choose) -> list[list[str]]:
    """n samples per prompt (prompt-major), from one batch drawn with `choose` (a seeded `sampler`)."""
    repeated = [p for p in prompts for _ in range(n)]
    ids = decode(policy, repeated, choose, max_new_tokens)
    texts = [clean_generation(policy.tokenizer, row) for row in ids]
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def nested_best(scores: list[list[float]], ns: list[int]) -> dict[int, list[int]]:
    """For each N: the index of the highest-scoring sample among the first N (first index wins ties)."""
    out = {}
    for n in ns:
        out[n] = [int(torch.tensor(row[:n]).argmax()) for row in scores]
    return out


def _read_samples(path) -> dict:
    """{example id: record} of a samples file. A torn last line (a kill) is redrawn; a damaged file is set
    aside and its samples drawn again (they are a deterministic function of the seed and example)."""
    if not path.exists():
        return {}
    try:
        lines = path.read_bytes().decode("utf-8").splitlines(keepends=True)
        records = [json.loads(line) for line in lines if line.endswith("\n")]
        problem = next((f"line {i} is not a samples record" for i, r in enumerate(records, 1)
                        if not isinstance(r, dict) or not isinstance(r.get("id"), str)
                        or not isinstance(r.get("samples"), list)), None)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError
        problem = short(error)
    if problem:
        set_aside(path, problem, "its samples are drawn again")
        return {}
    if lines and not lines[-1].endswith("\n"):  # new samples are appended: never after a torn line
        write_atomic(path, "".join(lines[:-1]))
    return {record["id"]: record for record in records}


@dataclass
class SampleStore:
    """Samples per policy × seed, appended per batch so an interrupted run keeps what it drew."""

    root: object
    policy: object
    formatter: object
    metrics: list
    bon: object  # BestOfNConfig
    max_new_tokens: int
    draws: list[list] = field(default_factory=list)  # query examples drawn together (one generator per group)
    loaded: dict = field(default_factory=dict)  # seed -> {example id: record}: the file is read once per seed
    meter: object = None  # a WorkMeter: drawing is shared work (every Best-of-N cell of the seed reads the samples)

    def path(self, seed: int):
        return self.root / "samples" / self.policy.name.replace("/", "_") / f"seed-{seed}.jsonl"

    def _known(self, seed: int) -> dict:
        if seed not in self.loaded:
            self.loaded[seed] = _read_samples(self.path(seed))
        return self.loaded[seed]

    def get(self, batch, seed: int) -> list[dict]:
        known = self._known(seed)
        wanted = {ex.id for ex in batch if ex.id not in known}
        groups = [g for g in self.draws if any(ex.id in wanted for ex in g)]
        grouped = {ex.id for g in groups for ex in g}
        for group in groups + [[ex] for ex in batch if ex.id in wanted and ex.id not in grouped]:
            self._draw([ex for ex in group if ex.id not in known], seed, known)
        return [known[ex.id] for ex in batch]

    def _draw(self, missing: list, seed: int, known: dict) -> None:
        prompts = [self.formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history) for ex in missing]
        n = max(self.bon.ns)
        choose = sampler(seed, sample_keys([ex.id for ex in missing], n), self.bon.temperature)
        with shared_work(self.meter):
            texts = sample_responses(self.policy, prompts, n, self.max_new_tokens, choose)
        path = self.path(seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            for ex, samples in zip(missing, texts):
                reference = ex.completion.reference if ex.completion else None
                scores = score_generations(self.metrics, samples, [reference] * n) if reference else [{}] * n
                record = {"id": ex.id, "samples": samples, "scores": scores}
                known[ex.id] = record
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")

"""An off-the-shelf reward model from Hugging Face, deployed as a global RM (reward-bench's model table).

    {name: hf_rm, model: PATH_OR_HUB_ID}

Any `AutoModelForSequenceClassification` with one output (the reward) and
its own tokenizer. The RM reads text, not the policy's tokens: the policy's
prompt (decoded, its special tokens removed) is the user turn and the
response so far the assistant turn, put through the RM's chat template where
it has one, else given as a text pair. So it works with any policy tokenizer.

Nothing is trained (no user parameters either): RM accuracy (Eq. 2), Best-of-N
and the win rate read the reward of the whole response; policy accuracy with
s_RGD (Eq. 5-6) and ARGS (Eq. 1) read prefix rewards R(x, y<=t), one
classifier forward over the whole text per prefix. That is the cost of a
text-level RM: ARGS reads k texts of prompt + prefix + candidate per step,
with no cache shared between steps (counted per row in RM tokens and FLOPs,
`cost.text_args_work`); s_RGD reads T prefixes of a T-token response.
Scores are memoised per (prompt, response) text within a run.

    persalign run demo-baselines 'methods=[{name: hf_rm, model: ./my-reward-model}]' best_of_n.enabled=true
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from persalign.core.errors import ConfigError
from persalign.core.files import fields, read_json, write_atomic
from persalign.core.registry import register_method
from persalign.rewards.method import GENERIC_USER
from persalign.rewards.settings import COUNT, TEXT, setting
from persalign.rewards.train import TrainLog


@dataclass
class HFRewardSettings:
    """An off-the-shelf sequence-classification reward model: nothing trained, nothing adapted."""

    model: str = setting("", "hub id or local folder of an AutoModelForSequenceClassification with one output",
                         TEXT)
    batch_size: int = setting(16, "texts per classifier forward", COUNT)
    max_length: int = setting(1024, "RM tokens read per text (longer texts keep their end: the response and the "
                                     "end of the prompt)", COUNT)
    seed: int = field(default=0, metadata={"doc": "the run's seed (nothing here is random)", "internal": True})


class HFRewardModel(nn.Module):
    """A Hugging Face sequence classifier as a global, text-level reward model."""

    name, display, personalized = "hf_rm", "HF RM", False
    Settings = HFRewardSettings
    deployments = ("args", "best_of_n", "rl")
    pretrained = True  # nothing to fit: the runner skips feature caching and training
    text_level = True  # ARGS scores candidates as text (`candidate_rewards`), not on the policy's states
    token_level = False
    pooling = "last"

    def __init__(self, hidden_size: int, settings: HFRewardSettings):
        super().__init__()
        if not settings.model:
            raise ConfigError("hf_rm needs `model:` (a hub id or a folder of a sequence-classification model)")
        self.settings, self.users = settings, {GENERIC_USER: 0}
        self.classifier, self.tokenizer = load_classifier(settings.model)
        # a text longer than max_length loses its beginning, never the response being judged: cutting the end
        # gave every ARGS candidate the same reward (ARGS silently greedy)
        self.tokenizer.truncation_side = "left"
        self.memo: dict[tuple[str, str], tuple[float, int, tuple]] = {}  # text -> (reward, RM tokens read, ids)
        # one reward per distinct RM input: texts cut to the same token ids are one input, whichever batch row
        # scored them (a float can differ in its last bit by row), so a tie from cutting is a fact of the ids
        self.by_input: dict[tuple, float] = {}
        self.policy_tokenizer = None
        self.truncation_ties = 0  # ARGS steps whose candidates all got one reward from cut inputs (reported)

    @classmethod
    def preflight(cls, settings: dict) -> None:
        """Before the run directory is made: the model can be found and has one output (its config only)."""
        classifier_labels(settings["model"])

    # --- text ---------------------------------------------------------------------------------
    def bind(self, lm) -> None:
        """The policy's tokenizer turns its token ids back into text."""
        self.policy_tokenizer = lm.tokenizer

    def _text(self, ids) -> str:
        return self.policy_tokenizer.decode(list(ids), skip_special_tokens=True).strip()

    def rm_input(self, prompt: str, response: str) -> dict:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False)
            return {"text": text, "add_special_tokens": False}
        return {"text": prompt, "text_pair": response}

    @torch.no_grad()
    def score_texts(self, pairs: list[tuple[str, str]]) -> torch.Tensor:
        """The classifier's reward of each (prompt, response) text, memoised with the RM tokens it read."""
        todo = list(dict.fromkeys(p for p in pairs if p not in self.memo))
        for start in range(0, len(todo), self.settings.batch_size):
            self.memo.update(zip(todo[start : start + self.settings.batch_size],
                                 self._forward(todo[start : start + self.settings.batch_size])))
        return torch.tensor([self.memo[p][0] for p in pairs], dtype=torch.float32)

    def _forward(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int, tuple]]:
        inputs = [self.rm_input(p, r) for p, r in pairs]
        text = [i["text"] for i in inputs]
        pair = [i["text_pair"] for i in inputs] if "text_pair" in inputs[0] else None
        batch = self.tokenizer(text, pair, padding=True, truncation=True, max_length=self.settings.max_length,
                               return_tensors="pt", add_special_tokens=inputs[0].get("add_special_tokens", True))
        device = next(self.classifier.parameters()).device
        logits = self.classifier(**{k: v.to(device) for k, v in batch.items()}).logits
        read = [tuple(ids[mask.bool()].tolist()) for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
        values = logits[:, 0].float().cpu().tolist()
        rewards = [self.by_input.setdefault(ids, value) for ids, value in zip(read, values)]
        return [(reward, len(ids), ids) for reward, ids in zip(rewards, read)]

    # --- the reward interface ------------------------------------------------------------------
    def reward_sums(self, backbone, users, prompts, responses):
        """(R(x, y), Σ_t R(x, y<=t)) per response: the prefix rewards are what s_RGD adds (pooling "last")."""
        self.bind(backbone.lm)
        sequence, steps = [], []
        for prompt, response in zip(prompts, responses):
            x = self._text(prompt)
            prefixes = [(x, self._text(response[: t + 1])) for t in range(len(response))]
            rewards = self.score_texts(prefixes) if prefixes else torch.zeros(0)
            sequence.append(float(rewards[-1]) if len(rewards) else 0.0)
            steps.append(float(rewards.sum()))
        return sequence, steps

    def sequence_scores(self, backbone, prompts, responses) -> list[float]:
        """R(x, y) of whole responses only (Best-of-N, the win rate): one forward per response."""
        self.bind(backbone.lm)
        pairs = [(self._text(p), self._text(r)) for p, r in zip(prompts, responses)]
        return [float(v) for v in self.score_texts(pairs)] if pairs else []

    def candidate_rewards(self, prompts, prefixes, candidates: torch.Tensor) -> tuple[torch.Tensor, list[list[int]]]:
        """(rows, k) rewards of prompt + prefix + each candidate token, and the RM tokens each row read."""
        texts = [self._text(p) for p in prompts]  # each row's prompt decoded once, not once per candidate
        pairs = [(x, self._text(list(prefix) + [int(c)]))
                 for x, prefix, row in zip(texts, prefixes, candidates.tolist()) for c in row]
        k = candidates.shape[1]
        rewards = self.score_texts(pairs).reshape(len(prompts), k).to(candidates.device)
        lengths = [self.memo[p][1] for p in pairs]  # counted as read even when memoised: the cost by design
        inputs = [self.memo[p][2] for p in pairs]
        read = [lengths[i * k : (i + 1) * k] for i in range(len(prompts))]
        cut = [max(row) >= self.settings.max_length for row in read]
        same_input = [len(set(inputs[i * k : (i + 1) * k])) == 1 for i in range(len(prompts))]
        self.truncation_ties += sum(c and same for c, same in zip(cut, same_input))  # from the ids, not the floats
        return rewards, read

    def user_ids(self, users: list[str]) -> torch.Tensor:
        return torch.zeros(len(users), dtype=torch.long)

    # --- nothing to learn; saved as its settings -------------------------------------------------
    def fit(self, backbone, train, val=None) -> TrainLog:
        return TrainLog()

    def adapt(self, backbone, user, support):
        return None

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "head.json", json.dumps({"method": self.name, "settings": asdict(self.settings)}))

    @classmethod
    def load(cls, folder: str | Path) -> HFRewardModel:
        meta = read_json(Path(folder) / "head.json", fields({"settings": dict}))
        return cls(0, HFRewardSettings(**meta["settings"])).eval()


HINT = "give a folder or hub id of an AutoModelForSequenceClassification"


def classifier_labels(name: str) -> tuple[str, str]:
    """(path, description) of a classifier whose config says it has one output (no weights read)."""
    from transformers import AutoConfig

    from persalign.models.loading import from_pretrained, resolve_model_path

    path, what = resolve_model_path(name), f"reward model {name!r} (hf_rm)"
    labels = from_pretrained(AutoConfig, path, what, HINT).num_labels
    if labels != 1:
        raise ConfigError(f"hf_rm {name!r}: a reward model has one output, this classifier has {labels} labels")
    return path, what


def load_classifier(name: str):
    """(classifier, tokenizer) of a sequence-classification RM with one output, on the CPU/GPU it fits."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from persalign.models.loading import from_pretrained, load_weights

    path, what = classifier_labels(name)
    tokenizer = from_pretrained(AutoTokenizer, path, what, HINT)
    classifier = load_weights(AutoModelForSequenceClassification, path, what, HINT).eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    classifier.config.pad_token_id = tokenizer.pad_token_id
    return classifier, tokenizer


register_method("hf_rm")(HFRewardModel)

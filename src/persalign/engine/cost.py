"""Counted cost: the work a deployment does for one output, in tokens and floating-point operations.

The verdict's cost column must be a property of the method, not of the run:
measured seconds move with warm-up, with whatever else the machine is doing
and with the backend. So every generating deployment also COUNTS its work
per output, from facts that do not depend on batching or timing: the prompt's
tokens prefilled, the tokens decoded one at a time, the candidate tokens an
ARGS step scores (k per step), the reward-model tokens read, each through a
model of known shape. A forward over t new tokens with c tokens already in
context costs

    2 · P_body · t  +  4 · L · d · Σ_{j=1..t} (c + j)  +  2 · P_head · (rows of logits)

(P_body: parameters of the decoder stack, embeddings excluded; L layers,
width d: the attention products; P_head: the output projection, applied only
where logits are read). A decode step of a row is counted while the row is
still writing (steps = min(generated + 1, max_new_tokens): the stop token's
step included). Best-of-N counts its N samples and the RM reading each.
"Cost ÷ greedy" in the verdict is a deployment's counted FLOPs per output
divided by zero-shot's on the same query items.

    python -c "from persalign.engine.cost import ModelShape as M, forward_flops as f; print(f(M(1e8, 5e7, 30, 576), 9))"
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ModelShape:
    body_params: float  # decoder-stack parameters (embedding lookup excluded)
    head_params: float  # output projection (vocabulary × width); 0 for a reward head counted separately
    layers: int
    width: int

    def as_dict(self) -> dict:
        return asdict(self)


def shape_of(model) -> ModelShape:
    """The shape of a Hugging Face causal LM (or any module with `config` and an input embedding)."""
    config = model.config
    embedding = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings()
    head_params = head.weight.numel() if head is not None else 0
    tied = head is not None and head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    body = total - embedding - (0 if tied else head_params)
    return ModelShape(float(body), float(head_params), int(config.num_hidden_layers), int(config.hidden_size))


def head_shape(module) -> ModelShape:
    """A reward head read on top of a backbone's states: only its parameters count."""
    return ModelShape(0.0, float(sum(p.numel() for p in module.parameters())), 0, 0)


def reward_shapes(policy, trained) -> dict:
    """The models a reward-guided deployment counts: the policy (a runner PolicyContext), the RM's backbone
    where it is another model (None: the frozen policy itself) and the RM's head."""
    classifier = getattr(trained.method, "classifier", None)  # a text-level RM (hf_rm) is its own model
    if classifier is not None:
        return {"policy": policy.shape, "reward": shape_of(classifier), "head": ModelShape(0.0, 0.0, 0, 0)}
    rm = trained.backbone.lm.model
    return {"policy": policy.shape, "reward": None if rm is policy.lm.model else shape_of(rm),
            "head": head_shape(trained.method)}


def forward_flops(shape: ModelShape, tokens: int, context: int = 0, logits: int = 0) -> float:
    """FLOPs of one row's forward over `tokens` new tokens after `context` cached ones (see module doc)."""
    attention = 4.0 * shape.layers * shape.width * (tokens * context + tokens * (tokens + 1) / 2)
    return 2.0 * shape.body_params * tokens + attention + 2.0 * shape.head_params * logits


@dataclass
class Work:
    """One output's counted work: tokens through each model and the FLOPs they cost."""

    prefill_tokens: float = 0  # prompt tokens the policy read in one forward (a share of a shared prefix's)
    decode_tokens: int = 0  # tokens the policy read one at a time
    candidate_tokens: int = 0  # ARGS: candidate tokens scored (k per step)
    reward_tokens: int = 0  # tokens a separate reward model read (its prefill, Best-of-N scoring)
    flops: float = 0.0
    parts: dict = field(default_factory=dict)  # FLOPs per component

    def add(self, part: str, flops: float) -> None:
        self.flops += flops
        self.parts[part] = self.parts.get(part, 0.0) + flops

    def columns(self) -> dict:
        """The per-row columns a deployment records (summed over the cell by `cell_work`)."""
        return {"work_prefill_tokens": self.prefill_tokens, "work_decode_tokens": self.decode_tokens,
                "work_candidate_tokens": self.candidate_tokens, "work_reward_tokens": self.reward_tokens,
                "work_flops": self.flops}


def steps_of(generated: int, max_new_tokens: int) -> int:
    """Decode steps a row took: its tokens plus the step that chose its stop token, at most the cap."""
    return min(generated + 1, max_new_tokens)


def greedy_work(policy: ModelShape, prompt: int, generated: int, max_new_tokens: int, work: Work | None = None,
                shared: tuple[int, int] = (0, 1)) -> Work:
    """Prefill the prompt (logits of its last token), then one forward per later step.

    `shared` = (P, n): the prompt's first P tokens are a prefix prefilled once for n prompts (ICL's
    per-user demonstration block), so this output carries 1/n of that prefill and reads its own
    remaining tokens after P cached ones."""
    work = work or Work()
    steps = steps_of(generated, max_new_tokens)
    cached, sharers = shared
    prefix_share = forward_flops(policy, cached) / sharers if cached else 0.0
    work.prefill_tokens += prompt - cached + (cached / sharers if cached else 0)  # an int where nothing is shared
    work.add("policy prefill", forward_flops(policy, prompt - cached, cached, 1) + prefix_share)
    for j in range(1, steps):
        work.decode_tokens += 1
        work.add("policy decode", forward_flops(policy, 1, prompt + j - 1, 1))
    return work


def exact_total(values: list) -> int | float:
    """Counts stay integers; floats are summed exactly rounded (math.fsum): a left-to-right sum of fractional
    shares rounds otherwise on Python 3.12, whose built-in sum compensates, than on 3.11."""
    return sum(values) if all(isinstance(v, int) for v in values) else math.fsum(values)


def cell_work(rows: list[dict]) -> dict | None:
    """A cell's counted work: per-output mean FLOPs and token totals (None where rows carry no counts)."""
    counted = [r for r in rows if r.get("work_flops") is not None]
    if not counted or len(counted) != len(rows):
        return None
    totals = {key: exact_total([r[key] for r in counted]) for key in counted[0] if key.startswith("work_")}
    return {"flops_per_output": totals["work_flops"] / len(counted), "outputs": len(counted),
            **{key[len("work_"):]: value for key, value in totals.items() if key != "work_flops"}}


def args_work(shapes: dict, prompt: int, generated: int, max_new_tokens: int, top_k: int, token_level: bool) -> Work:
    """ARGS (Eq. 1): `shapes` holds "policy", "reward" (None: the RM is the frozen policy) and "head".

    Sequence-level RMs score the k candidates of each step in one tree forward over the RM's cached prefix
    (each candidate sees the prefix and itself); on the shared backbone that forward also gives the next
    logits, so the policy decodes nothing else. Token-level RMs (GenARM) read the state the decode already
    computed: the policy's decode, plus the RM's own forward where it is another model.
    """
    policy, reward, head = shapes["policy"], shapes.get("reward"), shapes["head"]
    steps, work = steps_of(generated, max_new_tokens), Work()
    if token_level or reward is not None:
        greedy_work(policy, prompt, generated, max_new_tokens, work)
    if reward is not None:
        work.reward_tokens += prompt + (steps - 1 if token_level else 0)
        work.add("reward prefill", forward_flops(_body(reward), prompt))
        if token_level:
            work.add("reward decode", sum(forward_flops(_body(reward), 1, prompt + j - 1) for j in range(1, steps)))
    if not token_level:
        stack = _body(reward or policy)
        if reward is None:
            work.prefill_tokens += prompt
            work.add("policy prefill", forward_flops(policy, prompt, 0, 1))
            work.add("policy logits", 2.0 * policy.head_params * (steps - 1))
        work.candidate_tokens += top_k * steps
        work.add("candidates", top_k * sum(forward_flops(stack, 1, prompt + j) for j in range(steps)))
    work.add("reward head", 2.0 * head.head_params * top_k * steps)
    return work


def text_args_work(shapes: dict, prompt: int, generated: int, max_new_tokens: int, read: list[int]) -> Work:
    """ARGS with a text-level RM (hf_rm): the policy decodes as in greedy, and every step the RM reads k whole
    texts (prompt + prefix + candidate, in its own tokens, `read` holding each text's length) with no cache."""
    work = greedy_work(shapes["policy"], prompt, generated, max_new_tokens)
    work.candidate_tokens += len(read)
    work.reward_tokens += sum(read)
    work.add("reward texts", sum(forward_flops(shapes["reward"], n) for n in read))
    return work


def best_of_n_work(shapes: dict, prompt: int, samples: list[int], max_new_tokens: int) -> Work:
    """N sampled outputs (each its own prefill and decode, as drawn) and the RM reading each of them."""
    work, reader = Work(), _body(shapes.get("reward") or shapes["policy"])
    for sample in samples:
        greedy_work(shapes["policy"], prompt, sample, max_new_tokens, work)
        work.reward_tokens += prompt + sample
        work.add("reward reading", forward_flops(reader, prompt + sample) + 2.0 * shapes["head"].head_params)
    return work


def _body(shape: ModelShape) -> ModelShape:
    return ModelShape(shape.body_params, 0.0, shape.layers, shape.width)


def adaptation_work(logs: list, trained: ModelShape, features: ModelShape | None, support: list) -> dict:
    """Counted work of adapting the users whose support pairs are `support` (one PairData per user).

    Training: the usual 6 · P FLOPs per token read by the trained path (forward and backward), P the
    parameters on that path (the reward head on frozen features; the whole policy for soft prompts),
    tokens summed over every optimizer step (`TrainLog.tokens`). Frozen features: each support pair's
    prompt + response read once by the backbone (`features`; None where the method reads no features).
    """
    users = max(1, len(support))
    trained_params = trained.body_params + trained.head_params
    tokens = sum(getattr(log, "tokens", 0) for log in logs if log is not None)
    steps = sum(getattr(log, "steps", 0) for log in logs if log is not None)
    read = [len(p) + len(r) for data in support for p, pair in zip(data.prompts, zip(data.chosen, data.rejected))
            for r in pair] if features is not None else []
    flops = 6.0 * trained_params * tokens + sum(forward_flops(_body(features), n) for n in read)
    return {"flops_per_user": flops / users, "optimizer_steps_per_user": steps / users,
            "trained_tokens_per_user": tokens / users, "feature_tokens_per_user": sum(read) / users,
            "trained_params": trained_params}

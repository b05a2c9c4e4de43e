"""ARGS's candidate scorers: how the k candidate tokens of each step get their rewards (paper Eq. 1).

The loop (`args_decoding.args_decode`) is one; the method declares which scorer it needs:

- `TreeScorer` (sequence-level RMs): the k candidates go through ONE forward on the RM's prefix cache
  with a "tree" attention mask (each candidate sees the prefix and itself); only the chosen candidate's
  KV entry is kept. On the shared frozen backbone that forward also gives the policy's next logits.
- `TokenScorer` (token-level RMs, GenARM's `token_level`): the RM state after y<t scores every candidate
  token at once (one ARM step), no candidate forward.
- `TextScorer` (text-level RMs with their own tokenizer, hf_rm's `text_level`): each candidate becomes
  the text prompt + prefix + candidate, read whole by the RM.

    pytest tests/test_rewards_args.py tests/test_hf_rm.py
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from persalign.core.errors import ConfigError
from persalign.engine.work_meter import shared_work
from persalign.models.loading import decoder_stack


@dataclass
class RewardGuide:
    """A reward model ready to guide decoding: its backbone LM, its method, each row's user."""

    lm: object  # LoadedLM of the RM backbone (may be the policy itself)
    method: object  # RewardMethod
    users: list[str]
    lam: float | list[float] = 1.0  # λ of Eq. 1: the reward's weight against log π (one, or one per row)
    top_k: int = 10  # candidates scored per step (the policy's top k)
    # Prompt prefills of the policy shared by several decodes of the same batch (the λ choice: every
    # method × seed × λ decodes the same validation batches); None: prefill every time.
    prefills: dict | None = None


TREE_MASK_IMPLEMENTATIONS = ("eager", "sdpa")  # both take an additive float 4D mask as given


def tree_mask(mask: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """(rows, 1, k, past + k) additive mask: each candidate sees the prefix and itself, never another candidate.

    Additive floats (0 or the dtype's minimum), not booleans: eager attention
    adds a 4D mask to the scores, so a boolean mask would add 0/1 and let every
    candidate see every other one.
    """
    rows, past = mask.shape
    sees_prefix = mask.bool()[:, None, None, :].expand(rows, 1, k, past)
    sees_itself = torch.eye(k, dtype=torch.bool, device=mask.device)[None, None].expand(rows, 1, k, k)
    allowed = torch.cat([sees_prefix, sees_itself], dim=-1)
    return torch.zeros(allowed.shape, dtype=dtype, device=mask.device).masked_fill(~allowed, torch.finfo(dtype).min)


def check_tree_attention(backbone) -> None:
    implementation = getattr(backbone.config, "_attn_implementation", None) or "eager"
    if implementation not in TREE_MASK_IMPLEMENTATIONS:
        raise ConfigError(f"ARGS scores its k candidates with a custom 4D attention mask, which attention "
                          f"implementation {implementation!r} does not take; load the reward backbone with "
                          f"attn_implementation='sdpa' or 'eager'")


def tree_forward(backbone, cache, mask: torch.Tensor, next_pos: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """States of k candidate tokens appended to each row's cached prefix, in one forward.

    Appends k entries to `cache`; call `keep_chosen` afterwards.
    """
    rows, k = candidates.shape
    check_tree_attention(backbone)
    attention = tree_mask(mask, k, backbone.get_input_embeddings().weight.dtype)
    out = backbone(input_ids=candidates, attention_mask=attention,
                   position_ids=next_pos[:, None].expand(rows, k), past_key_values=cache, use_cache=True)
    return out.last_hidden_state


def keep_chosen(cache, past: int, choice: torch.Tensor) -> None:
    """Drop the k candidate entries from the cache except each row's chosen one."""
    rows = torch.arange(choice.shape[0], device=choice.device)
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name)
            tensor[:, :, past] = tensor[rows, :, past + choice]  # (rows, heads, dim); no copy of the prefix
            setattr(layer, name, tensor[:, :, : past + 1])


def select_rows(cache, index: torch.Tensor) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def reuse_prefill(memo: dict | None, key: tuple, compute):
    """`compute()` once per key; each caller gets its own copy, since decoding grows and trims caches.

    The key is the whole padded batch, so a reused prefill is exactly the forward this call would run
    (a forward's float sums depend on the batch's other rows and on padding).
    """
    if memo is None:
        return compute()
    if key not in memo:
        with shared_work(getattr(memo, "meter", None)):  # later cells and λ rows reuse it
            memo[key] = compute()
    return copy.deepcopy(memo[key])


def batch_key(kind: str, ids: torch.Tensor, mask: torch.Tensor) -> tuple:
    return kind, tuple(ids.shape), tuple(ids.flatten().tolist()), tuple(mask.flatten().tolist())


def shared_prefill(memo: dict | None, kind: str, forward, ids, mask, positions):
    """`forward(ids, mask, positions)` -> (cache, per-row tensor), run once per distinct prompt row (a prompt
    repeated in a batch, the λ grid's rows, is prefilled once and its rows expanded back) and once per batch
    seen (reused from `memo`). A batch of distinct prompts is forwarded as it is."""
    position: dict[tuple, int] = {}
    first, inverse = [], []
    for row, key in enumerate(tuple(r) for r in ids.tolist()):
        if key not in position:
            position[key] = len(first)
            first.append(row)
        inverse.append(position[key])
    repeated = len(first) < len(inverse)
    if repeated:
        index = torch.tensor(first, device=ids.device)
        ids, mask, positions = ids[index], mask[index], positions[index]
    cache, values = reuse_prefill(memo, batch_key(kind, ids, mask), lambda: forward(ids, mask, positions))
    if repeated:
        expand = torch.tensor(inverse, device=values.device)
        select_rows(cache, expand)
        values = values.index_select(0, expand)
    return cache, values


def policy_prefill(policy, ids, mask, positions, memo: dict | None):
    """(cache, log π(· | prompt)) of the policy's prefill, reused from `memo` when the batch was seen."""
    def forward(ids, mask, positions):
        out = policy.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           logits_to_keep=1)
        return out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), dim=-1)

    return shared_prefill(memo, "policy", forward, ids, mask, positions)


class TreeScorer:
    """Sequence-level RM: the k candidates go through one tree forward on the RM's prefix cache."""

    def __init__(self, guide: RewardGuide, policy, shared: bool):
        self.guide, self.policy, self.shared = guide, policy, shared
        self.backbone = decoder_stack(guide.lm.model)

    def prefill(self, ids, mask, positions):
        """(policy cache, first log-probs): the policy's prefill, and the RM's own unless it is the policy."""
        policy_cache, logprobs = policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)
        if self.shared:
            self.cache = policy_cache
        else:
            lm_device = self.guide.lm.device
            self.cache = self.backbone(input_ids=ids.to(lm_device), attention_mask=mask.to(lm_device),
                                       position_ids=positions.to(lm_device), use_cache=True).past_key_values
        return policy_cache, logprobs

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        self.past = mask.shape[1]
        self.states = tree_forward(self.backbone, self.cache, mask, next_pos, candidates)
        return self.guide.method.token_rewards(self.states.float(), users)

    def advance(self, choice, tokens, mask, next_pos) -> torch.Tensor | None:
        """Keep the chosen candidate's cache entry; with the shared backbone, its state gives the next logits."""
        keep_chosen(self.cache, self.past, choice)
        if not self.shared:
            return None
        chosen_states = self.states[torch.arange(len(choice), device=self.states.device), choice]
        return torch.log_softmax(self.policy.model.get_output_embeddings()(chosen_states).float(), dim=-1)

    def select(self, index) -> None:
        """Finished rows leave (the shared cache is the policy's: selected once, by the loop)."""
        if not self.shared:
            select_rows(self.cache, index)


class TokenScorer:
    """Token-level RM (GenARM): the RM state after y<t scores every candidate token at once (one ARM step)."""

    def __init__(self, guide: RewardGuide, policy, shared: bool):
        self.guide, self.policy, self.shared = guide, policy, shared
        self.backbone = decoder_stack(guide.lm.model)

    def prefill(self, ids, mask, positions):
        """(policy cache, first log-probs); with the shared backbone the RM's prefill is the policy's."""
        lm_device = self.guide.lm.device
        memo = self.guide.prefills if self.shared else None  # another RM's prefill is its own

        def forward(ids, mask, positions):
            out = self.backbone(input_ids=ids.to(lm_device), attention_mask=mask.to(lm_device),
                                position_ids=positions.to(lm_device), use_cache=True)
            return out.past_key_values, out.last_hidden_state[:, -1]

        self.cache, self.state = shared_prefill(memo, "stack", forward, ids, mask, positions)
        if self.shared:
            return self.cache, torch.log_softmax(self.policy.model.get_output_embeddings()(self.state).float(), dim=-1)
        return policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        return self.guide.method.next_token_rewards(self.state, candidates, users)

    def advance(self, choice, tokens, mask, next_pos) -> torch.Tensor | None:
        out = self.backbone(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                            past_key_values=self.cache, use_cache=True)
        self.state = out.last_hidden_state[:, -1]
        if not self.shared:
            return None
        return torch.log_softmax(self.policy.model.get_output_embeddings()(self.state).float(), dim=-1)

    def select(self, index) -> None:
        if not self.shared:  # the shared cache is the policy's: selected once, by the loop
            select_rows(self.cache, index)
        self.state = self.state[index]


class TextScorer:
    """A text-level RM with its own tokenizer (hf_rm): each candidate becomes the text prompt + prefix +
    candidate, read whole by the RM (no cache between steps); the policy decodes as in greedy."""

    def __init__(self, guide: RewardGuide, policy, prompts: list[list[int]]):
        self.guide, self.policy = guide, policy
        self.prompts, self.prefixes = list(prompts), [[] for _ in prompts]
        self.live = list(range(len(prompts)))
        self.read: list[list[int]] = [[] for _ in prompts]  # RM tokens of every text each row's steps read

    def prefill(self, ids, mask, positions):
        return policy_prefill(self.policy, ids, mask, positions, self.guide.prefills)

    def token_rewards(self, candidates, mask, next_pos, users) -> torch.Tensor:
        rewards, lengths = self.guide.method.candidate_rewards([self.prompts[r] for r in self.live],
                                                               [self.prefixes[r] for r in self.live], candidates)
        for row, read in zip(self.live, lengths):
            self.read[row] += read
        return rewards

    def advance(self, choice, tokens, mask, next_pos) -> None:
        for row, token in zip(self.live, tokens.tolist()):
            self.prefixes[row].append(token)
        return None

    def select(self, index) -> None:
        self.live = [self.live[i] for i in index.tolist()]


def make_scorer(policy, guide: RewardGuide, prompts: list[list[int]]):
    """The method declares how its candidates are scored (`token_level`, `text_level`); the loop is the same."""
    if getattr(guide.method, "text_level", False):
        return TextScorer(guide, policy, prompts)
    shared = guide.lm.model is policy.model
    return (TokenScorer if guide.method.token_level else TreeScorer)(guide, policy, shared)

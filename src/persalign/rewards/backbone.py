"""Reward backbones: hidden states of a causal LM at every response position.

A causal LM's hidden state at position t depends only on tokens <= t, so ONE
teacher-forced forward over `prompt + response` yields the state after every
prefix y<=t, and a head on those states gives the reward of every prefix
(policy accuracy, Eq. 5-6) and of the whole response (RM accuracy, Eq. 2).

Two modes:
- frozen: features computed once and cached on disk (safetensors), the mode
  that keeps CPU runs fast; only heads are trained.
- lora: the backbone gets a PEFT LoRA adapter (rank 8, alpha 16, rsLoRA, as in
  the paper's appendix F) and features are recomputed with gradients.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from persalign.engine.batching import pass_limits, plan_batches
from persalign.engine.decoding import Prefill, left_pad
from persalign.engine.scoring import continue_from_prefill, right_pad
from persalign.engine.work_meter import shared_work
from persalign.models.loading import decoder_stack
from persalign.models.numerics import kernel_tag
from persalign.rewards.feature_shards import FeatureShards

FEATURE_PASS = "unpadded"  # names the cache folder; change it when the pass's floats change


def response_positions(prompt_lengths: list[int], response_lengths: list[int]) -> tuple[list[int], list[int]]:
    """(rows, cols) of every response token in a right-padded batch of prompt + response."""
    rows, cols = [], []
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        rows += [row] * r
        cols += range(p, p + r)
    return rows, cols


class RewardBackbone:
    """Hidden states at response positions, with an optional on-disk cache (frozen mode)."""

    def __init__(self, lm, key: str, cache_dir: Path | None = None, trainable: bool = False):
        self.lm = lm
        self.key = key
        self.trainable = trainable
        self.batch_size = 16  # at most this many prompts per feature forward (reward.feature_batch_size)
        self.token_budget: int | None = None  # prompt tokens per forward; None: the device's default
        # One folder per backbone; each save appends a shard with only the NEW entries. (Rewriting one
        # growing file per batch wrote 35 GB in a 26-min study and doubled peak memory while saving.)
        # The folder names the feature pass: caches filled by the padded pass of earlier versions hold
        # other floats for the same pairs and are not mixed in.
        self.cache_path = (None if cache_dir is None or trainable
                           else Path(cache_dir) / "features" / f"{key}-{FEATURE_PASS}-{kernel_tag(lm.device.type)}")
        self._cache: dict[str, torch.Tensor] = {}  # the features this process has read or computed
        self._unsaved: set[str] = set()
        self.meter = None  # a WorkMeter: filling the cache is shared work (every method reads it)
        self._stored = FeatureShards(self.cache_path)  # on disk: read when asked for, not all at once

    def cached_keys(self) -> set[str]:
        """Every feature this backbone has without a forward: read or computed here, or in a stored shard."""
        return set(self._cache) | set(self._stored.where)

    def _have(self, keys) -> None:
        """Read the stored features of `keys` this process does not hold yet (the others stay missing)."""
        self._cache.update(self._stored.read([k for k in dict.fromkeys(keys) if k not in self._cache]))

    @property
    def hidden_size(self) -> int:
        return self.lm.model.config.hidden_size

    @property
    def stored_dtype(self) -> torch.dtype:
        """The cache keeps the backbone's own precision: a bf16 model's states are bf16 numbers, so
        storing them as float32 doubled disk and memory (7B: 14 KiB per token) for no information.
        Readers get float32 (the upcast is exact)."""
        dtype = self.lm.model.dtype
        return dtype if dtype in (torch.bfloat16, torch.float16) else torch.float32

    def states(self, prompts: list[list[int]], responses: list[list[int]],
               batch_size: int | None = None) -> list[torch.Tensor]:
        """One (len(response), hidden) tensor per pair; cached when frozen."""
        batch_size = batch_size or self.batch_size
        if self.trainable:
            return self._forward(prompts, responses, batch_size)
        keys = [_pair_key(p, r) for p, r in zip(prompts, responses)]
        self._have(keys)
        missing = sorted({k: i for i, k in enumerate(keys) if k not in self._cache}.items())
        if missing:
            index = [i for _, i in missing]
            with torch.no_grad(), shared_work(self.meter):
                computed = self._forward([prompts[i] for i in index], [responses[i] for i in index], batch_size)
            self._cache.update({k: s.contiguous() for (k, _), s in zip(missing, computed)})
            self._unsaved.update(k for k, _ in missing)
            self._save()
        return [self._cache[k].float() for k in keys]

    def states_before(self, prompts: list[list[int]], responses: list[list[int]],
                      batch_size: int | None = None) -> list[torch.Tensor]:
        """The state BEFORE each response token, [h(x_last), h(y_1..y_T-1)], for next-token rewards.

        Frozen: assembled from the cached response states and the cached last prompt
        state, so an autoregressive RM (GenARM) shares the features of every other
        method instead of a second forward over shifted sequences (9 min per cold study).
        """
        if self.trainable:  # gradients flow: one forward over (x[:-1]; x[-1], y<T)
            shifted = [[p[-1]] + r[:-1] if r else [] for p, r in zip(prompts, responses)]
            return self.states([p[:-1] for p in prompts], shifted, batch_size)
        states = self.states(prompts, responses, batch_size)
        last = self.prompt_states(prompts, batch_size)
        return [torch.cat([h[None], s[:-1]]) if len(s) else s for h, s in zip(last, states)]

    def prompt_states(self, prompts: list[list[int]], batch_size: int | None = None) -> list[torch.Tensor]:
        """Hidden state at each prompt's last token (frozen; filled as a by-product of `states`)."""
        keys = [_prompt_key(p) for p in prompts]
        self._have(keys)
        missing = list({k: p for k, p in zip(keys, prompts) if k not in self._cache}.values())
        if missing:
            with shared_work(self.meter):
                self._forward_shared_prompts(missing, [[] for _ in missing], batch_size or self.batch_size)
            self._save()
        return [self._cache[k].float() for k in keys]

    def _forward(self, prompts, responses, batch_size) -> list[torch.Tensor]:
        if not self.trainable:
            return self._forward_shared_prompts(prompts, responses, batch_size)
        out = []
        backbone = decoder_stack(self.lm.model)
        for start in range(0, len(prompts), batch_size):
            batch_p, batch_r = prompts[start : start + batch_size], responses[start : start + batch_size]
            ids, mask = right_pad([p + r for p, r in zip(batch_p, batch_r)], self.lm.tokenizer.pad_token_id,
                                  self.lm.device)
            hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            offset = 0
            rows, cols = response_positions([len(p) for p in batch_p], [len(r) for r in batch_r])
            picked = hidden[rows, cols]
            for r in batch_r:
                out.append(picked[offset : offset + len(r)])
                offset += len(r)
        return out

    @torch.no_grad()
    def _forward_shared_prompts(self, prompts, responses, batch_size) -> list[torch.Tensor]:
        """Frozen mode: each distinct prompt is run once; its responses continue from its cache.

        Prompts are batched shortest first within the token budget, one length per batch, and
        each continuation takes responses of one length (plan_batches(same_length=True)):
        nothing is padded, so a cached feature is a function of its pair alone. (Padded
        batches moved features by ~1e-5 with the other prompts of the batch, i.e. with what
        the cache already held.) The prompt's last hidden state is kept too (`states_before`).
        """
        pairs_of: dict[tuple, list[int]] = {}
        for i, p in enumerate(prompts):
            pairs_of.setdefault(tuple(p), []).append(i)
        distinct = list(pairs_of)
        out = [None if r else torch.zeros((0, self.hidden_size), dtype=self.stored_dtype) for r in responses]
        budget, cap = pass_limits(self.lm, batch_size, logits=False)  # CUDA: sized to its free memory, no row cap
        plan = plan_batches([len(p) for p in distinct], self.token_budget or budget, cap, same_length=True)
        for batch in tqdm(plan, desc=f"reward features ({self.key})", unit="batch", leave=False,
                          disable=True if len(plan) < 4 else None):
            state = self._prefill_keeping_last_state([distinct[b] for b in batch])
            pending = [(row, i) for row, b in enumerate(batch) for i in pairs_of[distinct[b]] if responses[i]]
            self._continue_by_length(state, pending, responses, out)
        return out

    def _continue_by_length(self, state, pending: list[tuple[int, int]], responses, out: list) -> None:
        """out[i] = states of responses[i] continued from prefill row `row`, one forward per length."""
        prefill_cache = [(layer.keys, layer.values) for layer in state.cache.layers]
        by_length: dict[int, list[tuple[int, int]]] = {}
        for row, i in pending:
            by_length.setdefault(len(responses[i]), []).append((row, i))
        for group in by_length.values():
            for layer, (keys, values) in zip(state.cache.layers, prefill_cache):  # undo the last continuation
                layer.keys, layer.values = keys, values
            hidden, _ = continue_from_prefill(self.lm, state, [row for row, _ in group],
                                              [responses[i] for _, i in group])
            for row, (_, i) in enumerate(group):
                out[i] = hidden[row].to(self.stored_dtype).cpu()

    def _prefill_keeping_last_state(self, prompts: list[tuple]):
        """Prefill (cache for the responses) that also records each prompt's last hidden state."""
        ids, mask, positions = left_pad([list(p) for p in prompts], self.lm.tokenizer.pad_token_id, self.lm.device)
        out = decoder_stack(self.lm.model)(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        # left padding: column -1 is every row's last token
        last = out.last_hidden_state[:, -1].to(self.stored_dtype).cpu()
        for p, h in zip(prompts, last):
            key = _prompt_key(list(p))
            if key not in self._cache and key not in self._stored:
                self._cache[key] = h.clone()
                self._unsaved.add(key)
        return Prefill(mask, positions, out.past_key_values, None, ids.shape[1])

    def _save(self) -> None:
        if self.cache_path is None or not self._unsaved:
            return
        self.cache_path.mkdir(parents=True, exist_ok=True)
        name = f"shard-{time.time_ns()}-{os.getpid()}.safetensors"
        tmp = self.cache_path / (name + ".tmp")  # a torn write never matches the shard-*.safetensors glob
        save_file({k: self._cache[k] for k in sorted(self._unsaved)}, str(tmp))
        tmp.replace(self.cache_path / name)
        self._unsaved.clear()


def weights_fingerprint(model) -> str:
    """A short hash of a model's config and a sample of its weights (cache keys must change with them)."""
    digest = hashlib.sha1(model.config.to_json_string().encode("utf-8"))
    for name, tensor in sorted(model.state_dict().items())[:: max(1, len(model.state_dict()) // 16)]:
        flat = tensor.detach().flatten()
        digest.update(name.encode() + flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _pair_key(prompt: list[int], response: list[int]) -> str:
    digest = hashlib.sha1(bytes(str(prompt), "ascii") + b"|" + bytes(str(response), "ascii")).hexdigest()
    return digest


def _prompt_key(prompt: list[int]) -> str:
    return "prompt-" + hashlib.sha1(bytes(str(list(prompt)), "ascii")).hexdigest()


def pad_states(states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, T, hidden) zero-padded states and their (batch, T) bool mask."""
    width = max(1, max(len(s) for s in states))
    hidden = states[0].shape[-1]
    out = states[0].new_zeros((len(states), width, hidden))
    mask = torch.zeros((len(states), width), dtype=torch.bool, device=states[0].device)
    for row, s in enumerate(states):
        out[row, : len(s)] = s
        mask[row, : len(s)] = True
    return out, mask

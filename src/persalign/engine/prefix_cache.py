"""A prompt prefix shared by several prompts is prefilled once and its KV cache reused (ICL's D_k^demo block).

The paper's ICL (§4, Eq. 7) conditions every query of user k on one demonstration
set D_k^demo, so all of that user's prompts start with the same tokens (the
instruction and the demonstrations). `PrefixCache.prefill` takes each row's
shared-prefix length, prefills every prefix not yet cached once (one row each),
keeps it (least recently used first out), and prefills only the rows' suffixes on
top of it. The tokens each row conditions on are exactly its full prompt; only
the float summation order differs from one full prefill (the equivalence test
checks decisions equal and log-probs within float tolerance).

Layout of the returned state, per row: [pad | prefix | pad | suffix], masked
where padded, positions counted over real tokens only, so decoding and the
scoring of responses (persalign.engine.scoring.continue_from_prefill) read it as they
read a plain left-padded prefill.

    python -c "from persalign.engine.prefix_cache import shared_prefix_lengths as s; print(s([[1,2,3],[1,2,4]],'uu',2))"
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers import DynamicCache

from persalign.engine.decoding import Prefill, left_pad, prefill
from persalign.models.loading import decoder_stack

MIN_SHARED_TOKENS = 16  # a shorter common prefix is not worth a forward of its own


def common_prefix_length(sequences: list[list[int]]) -> int:
    first, length = sequences[0], min(len(s) for s in sequences)
    for i in range(length):
        if any(s[i] != first[i] for s in sequences[1:]):
            return i
    return length


def shared_prefix_lengths(prompts: list[list[int]], groups: list, min_tokens: int = MIN_SHARED_TOKENS) -> list[int]:
    """Per prompt: the length of the token prefix it shares with every other prompt of its group (0: none).

    A group of one shares nothing; a prefix is left at least one token short of its prompt,
    whose last token must still be read to give the next-token logits."""
    members: dict = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    shared = [0] * len(prompts)
    for rows in members.values():
        if len(rows) < 2:
            continue
        common = common_prefix_length([prompts[i] for i in rows])
        for i in rows:
            length = min(common, len(prompts[i]) - 1)
            shared[i] = length if length >= min_tokens else 0
    return shared


class PrefixCache:
    """The KV cache of recently used prompt prefixes of one model (keys: the prefix's token ids)."""

    # Batches go user by user (decoders' `batches_by_user`), so a prefix not in the batch in hand is needed again
    # only as the next batch's first user: keep one. (Eight of 8-shot prompts held ~370 MB of an ICL cell.)
    def __init__(self, lm, capacity: int = 1):
        self.lm, self.capacity = lm, capacity
        self.entries: OrderedDict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.prefilled = 0  # prefixes computed (a reused one is not computed again)

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]], shared: list[int]) -> Prefill:
        """The same state as `decoding.prefill(lm, prompts)`, with each row's first `shared[i]` tokens
        read from the cache (computed here once where missing)."""
        if not any(shared):
            return prefill(self.lm, prompts)
        prefixes = [tuple(p[:n]) for p, n in zip(prompts, shared)]
        self._evict(keep=set(prefixes))  # before the new ones are computed: the old ones are not held beside them
        self._compute_missing([k for k in dict.fromkeys(prefixes) if k and k not in self.entries])
        lm = self.lm
        cache, prefix_mask = self._batch_cache(prefixes)  # at least one prefix is not empty (any(shared))
        suffix_ids, suffix_mask, suffix_positions = left_pad([p[n:] for p, n in zip(prompts, shared)],
                                                             lm.tokenizer.pad_token_id, lm.device)
        lengths = torch.tensor(shared, device=lm.device)[:, None]
        positions = torch.cat([(prefix_mask.cumsum(-1) - 1).clamp(min=0), suffix_positions + lengths], dim=1)
        mask = torch.cat([prefix_mask, suffix_mask], dim=1)
        out = lm.model(input_ids=suffix_ids, attention_mask=mask, position_ids=positions[:, prefix_mask.shape[1]:],
                       past_key_values=cache, use_cache=True, logits_to_keep=1)
        return Prefill(mask, positions, out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), dim=-1),
                       mask.shape[1])

    def _compute_missing(self, prefixes: list[tuple]) -> None:
        """One forward per new prefix, alone: its keys and values then do not depend on which other
        prefixes were new in the same batch (a resumed cell computes them exactly as a fresh one)."""
        stack = decoder_stack(self.lm.model)
        for key in prefixes:
            ids = torch.tensor([list(key)], device=self.lm.device)
            past = stack(input_ids=ids, use_cache=True).past_key_values
            self.entries[key] = [(layer.keys, layer.values) for layer in past.layers]
            self.prefilled += 1

    def _evict(self, keep: set) -> None:
        """Least recently used first, never a prefix of the batch in hand."""
        for key in [k for k in self.entries if k not in keep][: max(0, len(self.entries) - self.capacity)]:
            del self.entries[key]

    def _batch_cache(self, prefixes: list[tuple]) -> tuple[DynamicCache, torch.Tensor]:
        """The rows' prefixes right-aligned in one cache (zeros where masked) and their mask."""
        width = max(len(k) for k in prefixes)
        mask = torch.zeros((len(prefixes), width), dtype=torch.long, device=self.lm.device)
        for row, key in enumerate(prefixes):
            mask[row, width - len(key):] = 1
        cache = DynamicCache(config=self.lm.model.config)  # the layer kinds the model itself would build
        for layer in range(len(next(self.entries[k] for k in prefixes if k))):  # some row has a prefix
            keys, values = self._layer_rows(prefixes, layer, width)
            cache.update(keys, values, layer)
        for key in prefixes:
            if key:
                self.entries.move_to_end(key)
        return cache, mask

    def _layer_rows(self, prefixes: list[tuple], layer: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample_keys, sample_values = next(self.entries[k][layer] for k in prefixes if k)
        keys = sample_keys.new_zeros((len(prefixes), sample_keys.shape[1], width, sample_keys.shape[3]))
        values = sample_values.new_zeros((len(prefixes), sample_values.shape[1], width, sample_values.shape[3]))
        for row, key in enumerate(prefixes):
            if key:
                stored_keys, stored_values = self.entries[key][layer]
                keys[row, :, width - len(key):] = stored_keys[0]
                values[row, :, width - len(key):] = stored_values[0]
        return keys, values

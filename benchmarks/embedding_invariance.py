"""A text's embedding with other companions: its bits and the time (models/embedders.py, `TransformerEmbedder`).

The embedder (MiniLM, hard negatives and ICL-RAG retrieval) feeds a disk cache that keeps whichever call
computed a text first. Padded batches of 64 (the code before 2026-11-28) gave a text other last bits in another
batch (here: the same texts shuffled, or the first 37 alone), so the cached vector — and a near-tie in
retrieval — depended on the order in which tasks asked. `encode` now runs batches whose shape the token length
alone fixes (8 texts of one length, a short batch filled with copies), so a text's vector depends on the text
alone. Printed: the share of texts whose vector changes with its companions, each way (bit for bit), the
largest such difference, and the seconds per 1000 texts (the first N short descriptions of the real news file,
the texts the news study embeds; measure alone).

    python benchmarks/embedding_invariance.py --texts 1000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from common import NEWS, count, emit, machine

from persalign.models.embedders import TransformerEmbedder


@torch.no_grad()
def padded_batches(embedder: TransformerEmbedder, texts: list[str], batch: int = 64) -> np.ndarray:
    """The code before: batches of `batch` texts padded to their longest, masked mean pooling."""
    out = []
    for start in range(0, len(texts), batch):
        encoded = embedder.tokenizer(texts[start:start + batch], padding=True, truncation=True, max_length=256,
                                     return_tensors="pt")
        hidden = embedder.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out)


def timed(function, *args) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    return function(*args), time.perf_counter() - started


def companions_effect(encode, texts: list[str], first: np.ndarray) -> dict:
    """Share of texts whose vector differs, bit for bit, from `first` when encoded shuffled or the first 37
    by themselves, and the largest such difference."""
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = np.empty_like(first)
    shuffled[order] = encode([texts[i] for i in order])
    cut = min(37, len(texts))
    subset = encode(texts[:cut])
    differ = (first != shuffled).any(1) | np.pad((first[:cut] != subset).any(1), (0, len(texts) - cut))
    largest = max(np.abs(first - shuffled).max(), np.abs(first[:cut] - subset).max())
    return {"share": float(differ.mean()), "largest": float(largest)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=count, default=1000, help="how many of the news file's short descriptions")
    args = parser.parse_args()
    with open(NEWS, encoding="utf-8") as handle:
        texts = [json.loads(line)["short_description"] or "(empty)" for line, _ in zip(handle, range(args.texts))]
    embedder = TransformerEmbedder("minilm-l6")
    fixed, fixed_s = timed(embedder.encode, texts)
    padded, padded_s = timed(padded_batches, embedder, texts)
    changed = {"padded_batches_of_64": companions_effect(lambda t: padded_batches(embedder, t), texts, padded),
               "fixed_shape_batches": companions_effect(embedder.encode, texts, fixed)}
    per_1000 = 1000 / len(texts)
    seconds = {"padded_batches_of_64": round(padded_s * per_1000, 1),
               "fixed_shape_batches": round(fixed_s * per_1000, 1)}
    result = {"texts": len(texts), "machine": machine(), "changed_by_companions": changed,
              "seconds_per_1000_texts": seconds}
    for name in seconds:
        print(f"{name}: {changed[name]['share']:.1%} of {len(texts)} texts change bits with their companions "
              f"(largest {changed[name]['largest']:.1e}); {seconds[name]} s per 1000 texts")
    emit(result)


if __name__ == "__main__":
    main()

"""Sentence embedders for hard-negative mining and ICL-RAG retrieval, cached on disk.

- `minilm-l6` (default): all-MiniLM-L6-v2, mean pooling + L2 norm (the
  sentence-transformers recipe, done with plain transformers).
- `hashing-bow`: hashed bag of unigrams and bigrams; lexical, instant, no model.
- any other name: a Hugging Face encoder id or folder, mean pooled.

Embeddings are cached per (embedder, text) in `{cache}/embeddings/{key}.npz`,
so rebuilding preferences or re-running retrieval costs nothing the second time.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from persalign.core.errors import ModelLoadError
from persalign.core.files import set_aside, short, write_atomic
from persalign.core.registry import EMBEDDERS, MODELS, register_embedder
from persalign.models.aliases import default_cache_dir
from persalign.models.numerics import kernel_tag


def _text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class HashingBowEmbedder:
    """Hashed unigram+bigram counts, L2-normalised (deterministic, no model)."""

    def __init__(self, dim: int = 1024):
        self.dim = dim
        self.key = f"hashing-bow-{dim}"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            for gram in words + [a + " " + b for a, b in zip(words, words[1:])]:
                out[row, int(_text_hash(gram)[:8], 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class TransformerEmbedder:
    """Mean-pooled, L2-normalised encoder embeddings."""

    def __init__(self, name: str, cache_dir: str | None = None, device: str = "cpu"):
        from transformers import AutoModel, AutoTokenizer

        from persalign.models.loading import from_pretrained, load_weights, resolve_model_path

        path = resolve_model_path(name, cache_dir)
        what, hint = f"embedding model {name!r}", "set data.embedder (hashing-bow needs no model)"
        self.tokenizer = from_pretrained(AutoTokenizer, path, what, hint)
        self.model = load_weights(AutoModel, path, what, hint).to(device).eval()
        self.device = device
        self.name = name
        # other kernels: other last digits; "fixed": batches of fixed shape (caches of padded batches unused)
        self.key = re.sub(r"[^\w.-]", "_", name) + f"-fixed-{kernel_tag(device)}"

    @torch.no_grad()
    def encode(self, texts: list[str]) -> np.ndarray:
        """Texts of one token length, ROWS_PER_BATCH at a time (a short batch filled with copies of its first
        text): every forward pass has a shape fixed by the length alone, so a text's vector is the same bits
        whatever else is asked with it. Padded batches moved the last bits (~1e-7) with their companions, and
        the disk cache keeps whichever call computed a text first: the order of tasks decided near-ties in
        retrieval. Also faster than padded batches of 64 on CPU (benchmarks/embedding_invariance.py)."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        token_ids = self.tokenizer(texts, truncation=True, max_length=256)["input_ids"]
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        batches = [rows[start:start + ROWS_PER_BATCH] for rows in _rows_by_length(token_ids).values()
                   for start in range(0, len(rows), ROWS_PER_BATCH)]
        for rows in tqdm(batches, desc=f"embedding with {self.name}", unit="batch", leave=False,
                         disable=True if len(batches) < 64 else None):
            filled = rows + rows[:1] * (ROWS_PER_BATCH - len(rows))
            ids = torch.tensor([token_ids[row] for row in filled], device=self.device)
            hidden = self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            pooled = torch.nn.functional.normalize(hidden.mean(1), dim=-1)[:len(rows)]
            out[rows] = pooled.float().cpu().numpy()
        return out


ROWS_PER_BATCH = 8  # 8.0 s per 1000 news texts against 9.3 / 8.4 / 10.4 s at 4 / 16 / 32 (one-off, 2 CPU threads)


def _rows_by_length(token_ids: list[list[int]]) -> dict[int, list[int]]:
    """{token length: the rows of that length, in order}."""
    groups: dict[int, list[int]] = {}
    for row, ids in enumerate(token_ids):
        groups.setdefault(len(ids), []).append(row)
    return groups


def similarities(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(len(queries), len(keys)) dot products of float32 vectors (cosine similarities of normalised embeddings),
    computed in float64 and rounded to float32. numpy's BLAS splits a product by its own thread count
    (OMP_NUM_THREADS; Ray sets 1 in its workers), which moved float32 results in their last bits and flipped
    near-ties (a Ray worker mined 42 of the small chain's 384 negatives differently); float32 products are exact
    in float64, so any summation order rounds to the same float32 but at a rounding boundary."""
    product = np.asarray(queries, np.float64) @ np.asarray(keys, np.float64).T
    return product.astype(np.float32)


def _read_cache(path: Path) -> dict[str, np.ndarray]:
    """{text hash: vector} from the .npz cache; a damaged cache is set aside and the vectors computed again
    (no pickle: a file holding pickled objects is damage, not something to execute)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            hashes, vectors = stored["hashes"], stored["vectors"]
            if hashes.ndim != 1 or vectors.ndim != 2 or len(hashes) != len(vectors) or hashes.dtype.kind != "U":
                raise ValueError(f"hashes {hashes.shape} and vectors {vectors.shape} do not match")
            return dict(zip(hashes.tolist(), vectors))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        set_aside(path, short(error), "its embeddings are computed again")
        return {}


class CachedEmbedder:
    """Wraps an embedder with a per-text disk cache (one .npz per embedder)."""

    def __init__(self, embedder, cache_dir: Path | None):
        self.embedder = embedder
        self.key = embedder.key
        self.path = None if cache_dir is None else Path(cache_dir) / "embeddings" / f"{embedder.key}.npz"
        self._memory: dict[str, np.ndarray] = {}
        if self.path is not None and self.path.exists():
            self._memory = _read_cache(self.path)

    def encode(self, texts: list[str]) -> np.ndarray:
        hashes = [_text_hash(t) for t in texts]
        missing = sorted({h: t for h, t in zip(hashes, texts) if h not in self._memory}.items())
        if missing:
            vectors = self.embedder.encode([t for _, t in missing])
            self._memory.update({h: v for (h, _), v in zip(missing, vectors)})
            self._save()
        return np.stack([self._memory[h] for h in hashes]) if texts else np.zeros((0, 1), np.float32)

    def _save(self) -> None:
        if self.path is None:
            return
        keys, buffer = list(self._memory), io.BytesIO()
        np.savez(buffer, hashes=np.array(keys), vectors=np.stack([self._memory[k] for k in keys]))
        write_atomic(self.path, buffer.getvalue())  # this writer's own temporary name: Ray tasks share the cache


@register_embedder("hashing-bow")
def _hashing(cache_dir=None, device="cpu"):
    """Hashed unigram+bigram bag of words (lexical; no model, instant)."""
    return HashingBowEmbedder()


@register_embedder("minilm-l6")
def _minilm(cache_dir=None, device="cpu"):
    """all-MiniLM-L6-v2, mean pooled and L2-normalised (the default)."""
    return TransformerEmbedder("minilm-l6", cache_dir, device)


def load_embedder(name: str, cache_dir: str | None = None, device: str = "cpu") -> CachedEmbedder:
    """An embedder by registered name, model alias, hub id or folder, with disk cache."""
    root = default_cache_dir(cache_dir)
    if name in EMBEDDERS:
        inner = EMBEDDERS.get(name)(cache_dir=cache_dir, device=device)
    elif name in MODELS or Path(name).exists() or "/" in name:
        inner = TransformerEmbedder(name, cache_dir, device)
    else:
        raise ModelLoadError(f"unknown embedder {name!r} (known: {EMBEDDERS.names()}, or a model id/folder)")
    return CachedEmbedder(inner, root)

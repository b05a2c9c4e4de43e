"""Two processes writing the same file at once (CI, stop 67: three Ray tasks saved the shared embedding cache
through one NAME.tmp, and the second rename found the file gone). Each test runs the second writer inside the
first one's write — the interleaving Ray produced — so it is the same every run."""

from pathlib import Path

import numpy as np

from persalign.core.files import set_aside, write_atomic
from persalign.models import embedders
from persalign.models.embedders import CachedEmbedder, HashingBowEmbedder


def test_a_second_writer_between_the_first_ones_write_and_rename_leaves_one_whole_file(tmp_path, monkeypatch):
    target, real_replace, interleaved = tmp_path / "cell.json", Path.replace, []

    def replace_after_another_writer(self, destination):
        if not interleaved:
            interleaved.append(True)
            write_atomic(target, "second")
        return real_replace(self, destination)

    monkeypatch.setattr(Path, "replace", replace_after_another_writer)
    write_atomic(target, "first")
    assert interleaved and target.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["cell.json"]  # no temporary file left beside it


def test_two_embedding_caches_saving_at_once_both_finish_and_leave_a_readable_cache(tmp_path, monkeypatch):
    first, second = CachedEmbedder(HashingBowEmbedder(), tmp_path), CachedEmbedder(HashingBowEmbedder(), tmp_path)
    real_savez, interleaved = np.savez, []

    def savez_while_the_other_saves(file, **arrays):
        real_savez(file, **arrays)
        if not interleaved:
            interleaved.append(True)
            second.encode(["a text the second task embeds"])

    monkeypatch.setattr(embedders.np, "savez", savez_while_the_other_saves)
    vectors = first.encode(["a text the first task embeds"])
    monkeypatch.undo()
    assert interleaved
    reread = CachedEmbedder(HashingBowEmbedder(), tmp_path)
    texts = ["a text the first task embeds", "a text the second task embeds"]
    np.testing.assert_array_equal(reread.encode(texts), HashingBowEmbedder().encode(texts))
    np.testing.assert_array_equal(vectors[0], reread.encode(texts[:1])[0])
    assert sorted(p.name for p in (tmp_path / "embeddings").iterdir()) == [f"{first.key}.npz"]


def test_two_readers_of_one_damaged_cache_both_set_it_aside_and_go_on(tmp_path, monkeypatch, capsys):
    damaged, real_replace, interleaved = tmp_path / "shard-1.safetensors", Path.replace, []
    damaged.write_bytes(b"not a safetensors file")

    def replace_after_the_other_reader(self, destination):
        if not interleaved:
            interleaved.append(True)
            set_aside(damaged, "truncated", "its features are computed again")
        return real_replace(self, destination)

    monkeypatch.setattr(Path, "replace", replace_after_the_other_reader)
    set_aside(damaged, "truncated", "its features are computed again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-1.safetensors.damaged"]
    assert "another process moved it aside first, and its features are computed again" in capsys.readouterr().err

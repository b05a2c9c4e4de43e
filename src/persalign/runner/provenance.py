"""Provenance of a run: code version, package versions, machine, seeds, command, and its input files' hashes.

A resume compares the input files' sha256 with those of the run that computed
the stored cells (RunStore.prepare): a data file edited since is refused,
naming the file, instead of resuming cells built from the old data.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import platform
import resource
import subprocess
import sys
from pathlib import Path

import torch

from persalign.models.numerics import numerics

PACKAGES = ("persalign", "torch", "transformers", "peft", "rouge-score", "bert-score", "numpy", "scipy", "pandas")


def git_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def peak_memory_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_gpu_memory_mib() -> dict:
    """{"peak_gpu_memory_mib": what torch's CUDA allocator held at most so far} where this process used CUDA;
    {} elsewhere (resident memory says nothing of the GPU's)."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    return {"peak_gpu_memory_mib": torch.cuda.max_memory_allocated() / 2**20}


def input_files(data_config) -> list[Path]:
    """The files a data config reads: `data.path` (every file of a folder), and the files its loader names
    beside it (`companion_files`, e.g. LaMP's outputs file). Hub sources (`hf:`) and built-in data: none."""
    from persalign.core.registry import DATASETS

    path = data_config.path
    if not path or str(path).startswith("hf:"):
        return []
    root = Path(path).expanduser()
    if root.exists() and not (root.is_dir() or root.is_file()):  # hashing a FIFO or /dev/zero never ends
        from persalign.core.errors import DataError

        raise DataError(root, "not a regular file (a device or pipe); give a data file")
    files = sorted(f for f in root.iterdir() if f.is_file()) if root.is_dir() else [root]
    loader = DATASETS.get(data_config.dataset) if data_config.dataset in DATASETS else None
    companions = getattr(loader, "companion_files", None)
    files += [f for f in (companions(root) if companions and root.is_file() else []) if f.exists()]
    return [f for f in files if f.exists()]


def input_fingerprints(data_config) -> dict[str, str]:
    """sha256 of every input file, by its absolute path: a resume compares them with the run's."""
    fingerprints = {}
    for file in input_files(data_config):
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        fingerprints[str(file.resolve())] = digest.hexdigest()
    return fingerprints


def collect(device: str, seeds: list[int], inputs: dict[str, str] | None = None) -> dict:
    return {
        "inputs": inputs or {},
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "git": git_revision(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "numerics": numerics(),
        "seeds": seeds,
    }

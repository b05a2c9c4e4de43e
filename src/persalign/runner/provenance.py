"""Provenance of a run: code version, package versions, machine, seeds, command."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import resource
import subprocess
import sys
from pathlib import Path

import torch

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


def collect(device: str, seeds: list[int]) -> dict:
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "git": git_revision(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "seeds": seeds,
    }

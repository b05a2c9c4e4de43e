"""Errors that say which file, which record and what is wrong.

Every error a user can cause by their input derives from PersalignError, so the
CLI can print one clean line instead of a traceback.
"""

from __future__ import annotations


class PersalignError(Exception):
    """A problem with the user's input or configuration (not a bug)."""


class ConfigError(PersalignError):
    """A config file or override is invalid."""


class DataError(PersalignError):
    """A data file is malformed; the message names file, record and problem."""

    def __init__(self, path, problem: str, record: str | int | None = None):
        self.path = str(path)
        self.record = record
        self.problem = problem
        where = self.path if record is None else f"{self.path}, record {record}"
        super().__init__(f"{where}: {problem}")


class NonFiniteScores(PersalignError):
    """A method produced NaN or infinite rewards or scores: its cell cannot be ranked."""


class ModelLoadError(PersalignError):
    """A model could not be loaded; the message says how to fix it."""


def did_you_mean(name: object, choices) -> str:
    """' (did you mean 'prototypes'?)' for a near-miss spelling, else ''; appended to unknown-name errors."""
    import difflib

    matches = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


class OutputPathError(PersalignError):
    """A path persalign was asked to write that is not a regular file or a new path."""

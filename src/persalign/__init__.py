"""persalign: end-to-end evaluation of personalized alignment.

From per-user preference data, through personalized reward models and their
deployment (zero-shot, ICL, ICL-RAG, ARGS, best-of-N), to what the policy
writes for a user compared with what the user really wrote.

    persalign run demo          # the built-in demonstration
    persalign list              # what is registered
"""

__version__ = "0.1.0"
PUBLIC = ("run", "open_run", "plan", "Run")  # the Python API (persalign/api/runs.py, docs/api.md)


def __getattr__(name: str):
    """The API's names, imported on first use so that `import persalign` stays fast (no torch, no pandas)."""
    if name in PUBLIC:
        from persalign.api import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'persalign' has no attribute {name!r}")

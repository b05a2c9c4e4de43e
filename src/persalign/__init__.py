"""persalign: end-to-end evaluation of personalized alignment.

From per-user preference data, through personalized reward models and their
deployment (zero-shot, ICL, ICL-RAG, ARGS, best-of-N), to what the policy
writes for a user compared with what the user really wrote.

    persalign run demo          # the built-in demonstration
    persalign list              # what is registered
"""

__version__ = "0.1.0"

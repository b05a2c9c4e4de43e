"""Models: causal LMs and sentence encoders by hub id, local path or offline alias."""

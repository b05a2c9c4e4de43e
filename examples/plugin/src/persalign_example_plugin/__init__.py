"""An example persalign plugin: one reward method, installed as its own package (see rewards.py)."""

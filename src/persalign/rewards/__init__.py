"""Reward models: a backbone's hidden states + a (user-conditioned) head (DESIGN.md)."""

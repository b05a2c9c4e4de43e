"""Metrics: generation quality against the user's own text, and ranking accuracy."""

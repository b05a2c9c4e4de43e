"""Analyses computed from stored results only: correlations, bootstrap CIs."""

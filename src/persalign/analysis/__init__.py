"""Analyses computed from stored results only: correlations across methods (observed, and of the methods' true
means), intervals whose coverage is measured by simulation, Finding 3's cross-fitted gap, Holm, power."""

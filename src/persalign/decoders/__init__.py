"""Deployment strategies (decoders): how the policy is adapted to one user."""

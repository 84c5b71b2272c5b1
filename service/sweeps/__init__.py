"""Sweeps: hyperparameter searches whose trials are ordinary jobs (docs/sweeps.md)."""

"""A run's files: checkpoints, loading a trained run, workdir checks, metrics, plots."""

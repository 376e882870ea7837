"""Training: the config, the run, the loop, steps, optimizers, memory planning."""

"""The Transformer itself: config, constants, init, sublayers, layer, stacks, models."""

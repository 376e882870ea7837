"""Interoperability with other implementations' checkpoints (:mod:`.torchscale`)."""

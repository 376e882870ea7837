"""Scaling mechanics: meshes, multi-host start-up, FLOPs, targets, HLO, rooflines."""

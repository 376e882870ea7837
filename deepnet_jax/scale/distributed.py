"""Multi-host start-up: ``jax.distributed.initialize`` from ``config.distributed``.

JAX's multi-controller runtime runs one process per host (every process runs the same
command); each process owns its local devices, and the mesh spans all of them. Three ways to
start it:

* one machine: nothing to do (``num_processes`` 1, ``auto`` False: the default);
* ``auto=True``: ``jax.distributed.initialize()`` with no arguments, which detects the cluster
  itself — Cloud TPU pod slices (from the TPU metadata), SLURM (``SLURM_*`` variables), Open MPI
  and the ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` environment;
* explicit: ``coordinator_address`` (host:port of process 0), ``num_processes`` and
  ``process_id`` (each process its own), e.g. two processes on 127.0.0.1 for tests.

It must run before anything touches a JAX backend; ``train.run`` calls it first. On CPU the
cross-process collectives go through gloo.
"""

from __future__ import annotations

import dataclasses

import jax
import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field


@dataclasses.dataclass(frozen=True)
class DistributedFields:
    """``config.distributed``: how the processes of a multi-host run find each other."""

    auto: bool = field(
        False,
        "jax.distributed.initialize() auto-detection (TPU pods, SLURM, MPI, env)",
        resumable=True,
    )
    coordinator_address: str = field(
        "", "host:port of process 0 for an explicit launch", resumable=True
    )
    num_processes: int = field(1, "processes in an explicit launch", low=1, resumable=True)
    process_id: int = field(0, "this process's index in an explicit launch", low=0, resumable=True)
    initialization_timeout: float = field(
        300,
        "seconds to wait for every process to connect",
        kind="float",
        low=0,
        low_open=True,
        resumable=True,
    )


def default_config() -> ml_collections.ConfigDict:
    """``config.distributed``: :class:`DistributedFields`' defaults."""
    return config_schema.config_dict(DistributedFields)


def validate(c: ml_collections.ConfigDict) -> None:
    """One-line error for the first invalid or inconsistent ``distributed.*`` field."""
    config_schema.check_values(c, DistributedFields, "distributed.")
    n, pid = c.num_processes, c.process_id
    if pid >= n:
        raise ValueError(
            f"distributed.process_id={pid!r} must be an integer in [0, num_processes={n})"
        )
    explicit = bool(c.coordinator_address) or n > 1
    if c.auto and explicit:
        raise ValueError(
            "distributed.auto=True detects the cluster itself; leave coordinator_address, "
            "num_processes and process_id at their defaults"
        )
    if n > 1 and not c.coordinator_address:
        raise ValueError(
            f"distributed.num_processes={n} needs distributed.coordinator_address (host:port)"
        )
    if c.coordinator_address and ":" not in c.coordinator_address:
        raise ValueError(
            f"distributed.coordinator_address={c.coordinator_address!r} must be host:port"
        )


def initialize(c: ml_collections.ConfigDict) -> bool:
    """Start the multi-controller runtime as ``c`` says; True if this call started it.

    A no-op for a single process, and when the runtime is already up (e.g. a launcher or a
    notebook initialized it)."""
    validate(c)
    if not c.auto and c.num_processes == 1:
        return False
    if jax.distributed.is_initialized():
        return False
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if c.auto:
        jax.distributed.initialize(initialization_timeout=c.initialization_timeout)
    else:
        jax.distributed.initialize(
            c.coordinator_address,
            num_processes=c.num_processes,
            process_id=c.process_id,
            initialization_timeout=c.initialization_timeout,
        )
    return True

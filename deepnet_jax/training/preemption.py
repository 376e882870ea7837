"""Graceful stops on SIGTERM / SIGINT (preemption notices, Ctrl-C), agreed by every process.

:class:`StopSignals` turns the first SIGTERM or SIGINT a process receives into a flag; the
trainer then finishes the step in flight, writes a checkpoint and exits 0. A second signal acts
as usual (SIGINT raises ``KeyboardInterrupt``, SIGTERM terminates), so a stuck run can still be
stopped.

Agreement between hosts. A pod's hosts must stop after the same step, or their checkpoints would
disagree. Each process puts its flag into its rows of the next training batch (``STOP_KEY``, one
int32 per row) and the training step reduces it with a max over the whole global batch, an
all-reduce that XLA runs as part of the step. The result comes back with the step's metrics, so
every process reads the same value for the same step and stops after the same step, with no
extra host synchronisation per step. (``jax.experimental.multihost_utils.
reached_preemption_sync_point`` reaches the same agreement through the coordination service, but
only for SIGTERM, only when ``jax.distributed`` is initialized, and only while no Python SIGTERM
handler replaces the one it installs; the in-step reduction covers single-process runs, SIGINT
and every launcher alike.)
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import numpy as np

STOP_KEY = "stop_requested"  # the batch entry carrying each process's flag into the step
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Context manager: while active, the first SIGTERM/SIGINT sets :attr:`received` instead of
    ending the process; the previous handlers come back on exit.

    Outside the main thread (where Python cannot install handlers) it does nothing.
    """

    def __init__(self) -> None:
        self.received: str | None = None  # the signal's name, once one arrived
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                previous = signal.signal(sig, self._handle)
                self._previous[sig] = signal.SIG_DFL if previous is None else previous
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        signal.signal(signum, self._previous[signum])  # a second one acts

    def flags(self, rows: int) -> np.ndarray:
        """This process's flag for each of its ``rows`` batch rows: int32 [rows], 1 if a signal
        arrived."""
        return np.full((rows,), int(self.received is not None), np.int32)

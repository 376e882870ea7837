"""How ``benchmarks.vs_torchscale`` runs torchscale's side: in a spawned child process
(:class:`RemoteTheirs`, over a pipe to :func:`torch_worker`), or in this one
(:class:`LocalTheirs`, ``--in_process``); both answer ``build``, ``logits_with``,
``start``/``result``, ``run`` and ``matmul_gflops``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from typing import Any

import numpy as np

from benchmarks.vs_torchscale_theirs import TheirsTrainer, torch_matmul_gflops, torch_versions


def torch_worker(conn: Any) -> None:
    """The child process: builds a ``TheirsTrainer`` per ("build", …) message and answers
    ("logits", state dict, batch) with ``logits_with``'s, ("run", steps) with ``run``'s and
    ("matmul", m, k, n) with ``torch_matmul_gflops``'s result, until ("close",)."""
    trainer = None
    while True:
        message = conn.recv()
        if message[0] == "close":
            conn.close()
            return
        try:
            if message[0] == "build":
                trainer = TheirsTrainer(*message[1:])
                conn.send(("ok", {"param_count": trainer.param_count, **torch_versions()}))
            elif message[0] == "logits":
                conn.send(("ok", trainer.logits_with(*message[1:])))
            elif message[0] == "matmul":
                conn.send(("ok", torch_matmul_gflops(*message[1:])))
            else:
                conn.send(("ok", trainer.run(message[1])))
        except Exception as error:  # report it in the parent rather than hang it
            conn.send(("error", f"{type(error).__name__}: {error}"))


class RemoteTheirs:
    """``TheirsTrainer``'s interface over a pipe to a spawned ``torch_worker`` process.

    ``start(steps)`` sends a run without waiting for it (``result()`` collects it): the
    warm-up overlaps our compile.
    """

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=torch_worker, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self.info: dict[str, Any] = {}

    def _reply(self) -> Any:
        status, payload = self._conn.recv()
        if status == "error":
            raise RuntimeError(f"torch worker: {payload}")
        return payload

    def build(self, *args: Any) -> None:
        self._conn.send(("build", *args))
        self.info = self._reply()

    @property
    def param_count(self) -> int:
        return self.info["param_count"]

    def logits_with(self, state_dict: dict[str, Any], batch: dict[str, Any]) -> np.ndarray:
        """``TheirsTrainer.logits_with`` in the child: [B, T, vocab] logits of ``batch`` by a
        copy of the model holding ``state_dict``."""
        self._conn.send(("logits", state_dict, batch))
        return self._reply()

    def matmul_gflops(self, m: int, k: int, n: int) -> float:
        """torch's float32 [m, k] @ [k, n] GFLOP/s in the child (``torch_matmul_gflops``)."""
        self._conn.send(("matmul", m, k, n))
        return self._reply()

    def start(self, steps: int) -> None:
        self._conn.send(("run", steps))

    def result(self) -> tuple[float, float, float]:
        return self._reply()

    def run(self, steps: int) -> tuple[float, float, float]:
        self.start(steps)
        return self.result()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the child may be gone already
            self._conn.send(("close",))
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()


class LocalTheirs:
    """``RemoteTheirs``'s interface on a ``TheirsTrainer`` in this process (``--in_process``)."""

    def __init__(self) -> None:
        self.trainer: TheirsTrainer | None = None
        self.info: dict[str, Any] = {}
        self._pending = 0

    def build(self, *args: Any) -> None:
        self.trainer = TheirsTrainer(*args)
        self.info = {"param_count": self.trainer.param_count, **torch_versions()}

    @property
    def param_count(self) -> int:
        return self.info["param_count"]

    def logits_with(self, state_dict: dict[str, Any], batch: dict[str, Any]) -> np.ndarray:
        """``TheirsTrainer.logits_with``: [B, T, vocab] logits of ``batch`` by a copy of the
        model holding ``state_dict``."""
        return self.trainer.logits_with(state_dict, batch)

    def matmul_gflops(self, m: int, k: int, n: int) -> float:
        return torch_matmul_gflops(m, k, n)

    def start(self, steps: int) -> None:
        self._pending = steps

    def result(self) -> tuple[float, float, float]:
        return self.trainer.run(self._pending)

    def run(self, steps: int) -> tuple[float, float, float]:
        return self.trainer.run(steps)

    def close(self) -> None:
        pass

"""Metrics files: the JSONL records and the TensorBoard scalars, read back from the event files.

Neither tensorboardX nor a TensorFlow-free tensorboard install has an event-file reader, so the
test parses the TFRecord framing itself ([u64 length][u32 masked CRC-32C of the length][data]
[u32 masked CRC-32C of the data], little-endian), checks both CRCs, and decodes each record as
``tensorboardX.proto.event_pb2.Event``.
"""

import importlib.util
import os
import struct
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import masked_crc32c

from deepnet_jax.runs import metrics


def _read_events(path):
    """Every ``Event`` of one event file, CRCs checked."""
    with open(path, "rb") as f:
        data = f.read()
    events, pos = [], 0
    while pos < len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        assert header_crc == masked_crc32c(header)
        body = data[pos + 12 : pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        assert body_crc == masked_crc32c(body)
        events.append(event_pb2.Event.FromString(body))
        pos += 16 + length
    return events


def _scalars(logdir):
    """Sorted (tag, step, value) of every scalar summary in the event files under ``logdir``."""
    names = [n for n in os.listdir(logdir) if "tfevents" in n]
    assert names, f"no event file in {logdir}"
    out = []
    for name in names:
        for event in _read_events(os.path.join(logdir, name)):
            out.extend((v.tag, event.step, v.simple_value) for v in event.summary.value)
    return sorted(out)


def test_jsonl_and_tensorboard_hold_the_same_records(tmp_path):
    writer = metrics.MetricsWriter(str(tmp_path))
    writer.write("train", 10, {"loss": 2.5, "lr": jnp.float32(1e-3), "tokens": np.int64(640)})
    writer.write("eval", 10, {"loss": 2.0, "bleu": 12.5, "note": "text", "best": True})
    writer.write("train", 20, {"loss": 1.5, "lr": 5e-4, "tokens": 600})
    writer.close()
    assert metrics.read(str(tmp_path)) == [
        {"split": "train", "step": 10, "loss": 2.5, "lr": pytest.approx(1e-3), "tokens": 640},
        {"split": "eval", "step": 10, "loss": 2.0, "bleu": 12.5, "note": "text", "best": True},
        {"split": "train", "step": 20, "loss": 1.5, "lr": 5e-4, "tokens": 600},
    ]
    # Strings and bools stay out of TensorBoard; values are stored as float32.
    assert _scalars(tmp_path / "tensorboard") == [
        ("eval/bleu", 10, 12.5),
        ("eval/loss", 10, 2.0),
        ("train/loss", 10, 2.5),
        ("train/loss", 20, 1.5),
        ("train/lr", 10, pytest.approx(1e-3)),
        ("train/lr", 20, pytest.approx(5e-4)),
        ("train/tokens", 10, 640.0),
        ("train/tokens", 20, 600.0),
    ]


def test_flush_then_resume_and_write_after_close(tmp_path):
    first = metrics.MetricsWriter(str(tmp_path))
    first.write("train", 1, {"loss": 3.0})
    first.flush()
    assert _scalars(tmp_path / "tensorboard") == [("train/loss", 1, 3.0)]
    first.write("train", 2, {"loss": 2.5})
    first.close()
    resumed = metrics.MetricsWriter(str(tmp_path))  # same second, same process: a new file
    resumed.write("train", 2, {"loss": 2.0})
    resumed.close()
    resumed.write("eval", 2, {"loss": 1.0})  # reopens
    resumed.close()
    resumed.close()  # idempotent
    assert len(os.listdir(tmp_path / "tensorboard")) == 4  # one per open…close span
    assert _scalars(tmp_path / "tensorboard") == [
        ("eval/loss", 2, 1.0),
        ("train/loss", 1, 3.0),
        ("train/loss", 2, 2.0),
        ("train/loss", 2, 2.5),
    ]
    assert [r["step"] for r in metrics.read(str(tmp_path))] == [1, 2, 2, 2]


def test_other_processes_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    writer = metrics.MetricsWriter(str(tmp_path / "run"))
    writer.write("train", 1, {"loss": 3.0})
    writer.flush()
    writer.close()
    assert not (tmp_path / "run").exists()


WITHOUT_TORCH = """
import sys
from deepnet_jax.runs import metrics
writer = metrics.MetricsWriter(sys.argv[1])
writer.write("train", 1, {"loss": 2.5})
writer.close()
print("torch" in sys.modules)
import torch  # still importable afterwards
print(torch.__name__)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_tensorboard_writer_does_not_import_torch(tmp_path):
    """tensorboardX's writer imports torch when installed (seconds of every run's start); the
    metrics writer keeps it out, and torch imports as usual afterwards."""
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "torch"], proc.stdout
    assert _scalars(tmp_path / "tensorboard") == [("train/loss", 1, 2.5)]

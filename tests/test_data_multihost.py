"""Two processes on 127.0.0.1 (jax.distributed, gloo): one tokenizer, disjoint covering rows."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from conftest import xla_flags
from test_data_pipeline import _write_corpus

from deepnet_jax.data import pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "multihost_data_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two(corpora, out) -> list[dict]:
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags()}
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(pid), port, str(corpora[pid]), str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in range(2)
    ]
    try:
        for p in procs:
            p.wait(timeout=180)
    finally:
        for p in procs:  # only this test's own processes are stopped
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for pid, p in enumerate(procs):
        path = out / f"out{pid}.json"
        with p.stderr:
            assert path.exists(), f"process {pid} wrote nothing: {p.stderr.read()[-2000:]}"
        results.append(json.loads(path.read_text()))
    return results


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("mh_corpus")
    _write_corpus(root)
    return root


def test_two_processes_share_process_0s_tokenizer_and_split_each_batch(corpus, tmp_path):
    a, b = _run_two([corpus, corpus], tmp_path)
    assert "error" not in a and "error" not in b, (a.get("error"), b.get("error"))
    # Per-host data_dirs: process 1 got process 0's tokenizer bytes, not its own training.
    assert a["tokenizer_sha256"] == b["tokenizer_sha256"]
    files = os.listdir(tmp_path / "data1" / "tokenizers")
    assert len(files) == 1 and files[0].endswith(".model")
    # The two processes' rows are the halves of the single-process global batches.
    single = pipeline.DataPipeline(
        pipeline.DataOptions(
            dataset="local_parallel",
            data_dir=str(tmp_path / "data0"),
            source_dir=str(corpus),
            src_ext="de",
            tgt_ext="en",
            tokenizer="unigram",
            vocab_size=300,
            max_len=48,
            batch_size=8,
        ),
        "encdec",
    )
    it = iter(single.train_dataset())
    for part_a, part_b in zip(a["batches"], b["batches"], strict=True):
        whole = next(it)
        for k, v in whole.items():
            np.testing.assert_array_equal(np.concatenate([part_a[k], part_b[k]]), v)


def test_failure_on_process_0_does_not_hang_the_others(corpus, tmp_path):
    empty = tmp_path / "empty_corpus"
    empty.mkdir()
    a, b = _run_two([empty, corpus], tmp_path)
    assert "training split is required" in a["error"]
    assert b["error"] == (
        "DataPreparationError: process 0 could not prepare the data; its log has the error"
    )

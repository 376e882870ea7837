"""One process of the two-process data test (run by test_data_multihost.py, not by pytest).

argv: process_id port corpus_dir out_dir. Writes out_dir/out<id>.json with the tokenizer's
sha256, three training batches (this process's rows) or the error it raised.
"""

import hashlib
import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")


def main() -> None:
    pid, port, corpus, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    jax.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=60
    )
    from deepnet_jax.data import pipeline

    options = pipeline.DataOptions(
        dataset="local_parallel",
        data_dir=f"{out}/data{pid}",  # per-host disks
        source_dir=corpus,
        src_ext="de",
        tgt_ext="en",
        tokenizer="unigram",
        vocab_size=300,
        max_len=48,
        batch_size=8,
    )
    try:
        data = pipeline.DataPipeline(options, "encdec")
        it = iter(data.train_dataset())
        result = {
            "tokenizer_sha256": hashlib.sha256(data.tokenizer.model_proto).hexdigest(),
            "batches": [{k: v.tolist() for k, v in next(it).items()} for _ in range(3)],
        }
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {e}"}
    with open(f"{out}/out{pid}.json", "w") as f:
        json.dump(result, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

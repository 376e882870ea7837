"""Decoding speed: cached vs uncached generation, and beam-5 sentences per second.

Run from the repository root::

    python -m benchmarks.decode [--workdir=RUN] [--batch=32] [--length=64] [--repeats=3]
    python -m benchmarks.decode --smoke          # a 2-layer model, seconds (CI runs this)
    python -m benchmarks.decode --workdir=RUN --out=docs/records/decode.json \\
        --docs=docs/benchmarks.md

Rows (one JSON line each):

* ``generation`` — greedy generation of exactly ``--length`` tokens for ``--batch`` sources of
  ``--src_len`` tokens with the default model (6L-6L DeepNorm, d 128, vocab 4000; random
  parameters: speed does not depend on their values), three ways in one process:

  - ``cached``: ``EncoderDecoder.decode_step`` over the stacked KV cache (the project's
    decoder), one token per step, all steps in one jitted ``lax.fori_loop``;
  - ``uncached_full``: the full decoder re-run over the whole fixed-size target buffer every
    step (the static-shape way to decode without a cache under jit), one jitted loop;
  - ``uncached_prefix``: the full decoder re-run over the prefix generated so far (length
    t + 1 at step t, one compiled function per length, compiled before timing) — the least
    work an uncached decoder can do.

  Each is compiled, then timed ``--repeats`` times (best kept); the encoder runs once per
  batch in all three. Reported: seconds per batch and ``speedup_vs_*`` = uncached / cached
  time (issue target ≥ 5× at length 64).
* ``beam`` — ``search.translate_ids`` with beam 5 (length penalty 1.0, max length 1.2·s+10)
  on the first ``--sentences`` validation sources of a trained run (``--workdir``: its
  parameters and tokenizer; the corpus must be prepared) or, without one, on random sources
  of 8–40 tokens with random parameters (which rarely emit EOS, so every hypothesis runs to
  its length limit: a lower bound). Timed after a warm-up pass that compiles every length
  bucket: ``sentences_per_s``.

``--out`` writes the rows as a record (command, commit, machine, date); ``--docs`` writes the
``decode`` block of that file from it (:func:`table`; ``tests/test_decode_record.py``
regenerates it from the committed record).
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.common import records
from deepnet_jax.common.tokens import BOS_ID, EOS_ID, FIRST_CONTENT_ID
from deepnet_jax.configs import default as default_config
from deepnet_jax.decoding import search
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.training import config as train_config
from deepnet_jax.training import loading as run_loading


def _model_config(smoke: bool):
    c = train_config.resolve(default_config.get_config()).model
    c.attention_impl = "reference"  # what attention_impl="auto" picks on a CPU (attention_auto)
    if smoke:
        c.num_encoder_layers = c.num_decoder_layers = 2
        c.d_model, c.num_heads, c.ffn_dim, c.vocab_size = 32, 4, 64, 200
    return c


def _best_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile + warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def _cached_decoder(model, batch: int, src_len: int, length: int):
    """Greedy decoding with the key/value cache: one token per step, [B, S] → [B, length + 1]."""

    @jax.jit
    def cached(params, src):
        enc = model.apply({"params": params}, src, method=architectures.EncoderDecoder.encode)
        cache = architectures.init_cache(model.config, batch, length, src_len)
        out = jnp.zeros((batch, length + 1), jnp.int32).at[:, 0].set(BOS_ID)

        def step(t, out, cache, enc_out=None):
            token = jax.lax.dynamic_slice_in_dim(out, t, 1, axis=1)
            logits, cache = model.apply(
                {"params": params},
                token,
                src,
                cache,
                t,
                enc_out,  # given on the first step only: fills the cross-attention cache
                method=architectures.EncoderDecoder.decode_step,
            )
            nxt = jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32)
            return jax.lax.dynamic_update_slice_in_dim(out, nxt[:, None], t + 1, axis=1), cache

        carry = step(0, out, cache, enc)
        return jax.lax.fori_loop(1, length, lambda t, c: step(t, *c), carry)[0]

    return cached


def _uncached_full_decoder(model, batch: int, length: int):
    """Greedy decoding re-running the decoder over the whole fixed-length buffer each step."""

    @jax.jit
    def uncached_full(params, src):
        enc = model.apply({"params": params}, src, method=architectures.EncoderDecoder.encode)
        out = jnp.zeros((batch, length + 1), jnp.int32).at[:, 0].set(BOS_ID)

        def step(t, out):
            logits = model.apply(
                {"params": params},
                out[:, :length],
                enc,
                src,
                method=architectures.EncoderDecoder.decode,
            )
            nxt = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, t, 1, False), axis=-1)
            return jax.lax.dynamic_update_slice_in_dim(
                out, nxt.astype(jnp.int32)[:, None], t + 1, axis=1
            )

        return jax.lax.fori_loop(0, length, step, out)

    return uncached_full


def _uncached_prefix_decoder(model, batch: int, length: int):
    """Greedy decoding re-running the decoder over the growing prefix (a compile per length)."""
    encode = jax.jit(
        lambda p, s: model.apply({"params": p}, s, method=architectures.EncoderDecoder.encode)
    )

    @jax.jit
    def next_token(params, prefix, enc, src):
        logits = model.apply(
            {"params": params}, prefix, enc, src, method=architectures.EncoderDecoder.decode
        )
        return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)

    def uncached_prefix(params, src):
        enc = encode(params, src)
        out = jnp.full((batch, 1), BOS_ID, jnp.int32)
        for _ in range(length):
            out = jnp.concatenate([out, next_token(params, out, enc, src)[:, None]], axis=1)
        return out

    return uncached_prefix


def generation_row(config, batch: int, src_len: int, length: int, repeats: int) -> dict:
    """Cached against the two uncached greedy decoders on random sources: their outputs must
    agree token for token; the best of ``repeats`` times of each and the speedups."""
    model = architectures.build(config)
    rng = np.random.default_rng(0)
    src = jnp.asarray(
        rng.integers(FIRST_CONTENT_ID, config.vocab_size, (batch, src_len)), jnp.int32
    )
    params = model_inputs.init_params(model, "encdec", {"src": src, "inputs": src[:, :8]}, seed=0)
    decoders = {
        "cached": _cached_decoder(model, batch, src_len, length),
        "full": _uncached_full_decoder(model, batch, length),
        "prefix": _uncached_prefix_decoder(model, batch, length),
    }
    outputs = {name: fn(params, src) for name, fn in decoders.items()}
    # the three decoders must agree token for token (greedy over the same parameters)
    agree = bool(
        np.array_equal(outputs["cached"], outputs["full"])
        and np.array_equal(outputs["cached"], outputs["prefix"])
    )
    t_cached, t_full, t_prefix = (
        _best_time(functools.partial(decoders[name], params, src), repeats)
        for name in ("cached", "full", "prefix")
    )
    return {
        "row": "generation",
        "layers": f"{config.num_encoder_layers}L-{config.num_decoder_layers}L",
        "d_model": config.d_model,
        "batch": batch,
        "src_len": src_len,
        "length": length,
        "outputs_agree": agree,
        "cached_s": round(t_cached, 4),
        "uncached_full_s": round(t_full, 4),
        "uncached_prefix_s": round(t_prefix, 4),
        "speedup_vs_full": round(t_full / t_cached, 2),
        "speedup_vs_prefix": round(t_prefix / t_cached, 2),
    }


def beam_row(config, workdir: str | None, sentences: int, batch: int) -> dict:
    options = search.SearchOptions(beam_size=5, length_penalty=1.0)
    if workdir:
        run = run_loading.load_run(workdir)
        from deepnet_jax.data import pipeline

        data = pipeline.DataPipeline(
            run.config.data,
            "encdec",
            tokenizer_path=run.run_dir.tokenizer,
        )
        sources = data.translation_set("validation").source_ids[:sentences]
        model, params, what = run.model, run.params, f"validation sources of {workdir}"
    else:
        model = architectures.build(config)
        rng = np.random.default_rng(1)
        sources = [
            np.append(
                rng.integers(FIRST_CONTENT_ID, config.vocab_size, rng.integers(7, 40)), EOS_ID
            )
            for _ in range(sentences)
        ]
        example = {"src": np.ones((1, 8), np.int32), "inputs": np.ones((1, 8), np.int32)}
        params = model_inputs.init_params(model, "encdec", example, seed=0)
        what = "random sources, random parameters"
    search.translate_ids(model, params, sources, options, batch)  # compiles every bucket
    start = time.perf_counter()
    out = search.translate_ids(model, params, sources, options, batch)
    elapsed = time.perf_counter() - start
    return {
        "row": "beam",
        "beam_size": 5,
        "sentences": len(sources),
        "batch": batch,
        "inputs": what,
        "mean_output_tokens": round(float(np.mean([len(o) + 1 for o in out])), 2),
        "seconds": round(elapsed, 3),
        "sentences_per_s": round(len(sources) / elapsed, 2),
    }


BLOCK = "decode"  # docs/benchmarks.md's block :func:`table` writes
_DECODERS = (  # (decoder, its seconds per batch, its uncached ÷ cached time) of a generation row
    ("cached", "cached_s", None),
    ("uncached_full", "uncached_full_s", "speedup_vs_full"),
    ("uncached_prefix", "uncached_prefix_s", "speedup_vs_prefix"),
)


def table(record: dict) -> str:
    """The ``decode`` block: the generation row's seconds per batch for each decoder and
    uncached ÷ cached time (bold: ``uncached_full``'s, the one the ≥ 5× target is on), whether
    the three decoders' tokens agree, then the beam row's sentences per second, seconds,
    and mean output tokens per sentence (EOS included)."""
    rows = {r.get("row", "device"): r for r in record["rows"]}
    g, beam, device = rows["generation"], rows["beam"], rows["device"]
    lines = [
        f"Model {g['layers']}, d {g['d_model']}, random parameters; device "
        f"`{device['device']}` ({device['backend']}). " + records.made_line(record),
        "",
        f"| decoder | s per batch ({g['batch']} × {g['length']} tokens) | uncached / cached |",
        "|---|---:|---:|",
    ]
    for name, seconds, speedup in _DECODERS:
        ratio = "1" if speedup is None else f"{g[speedup]:.2f}×"
        ratio = f"**{ratio}**" if speedup == "speedup_vs_full" else ratio
        lines.append(f"| {name} | {g[seconds]:.3f} | {ratio} |")
    lines += [
        "",
        f"`outputs_agree: {str(g['outputs_agree']).lower()}`.",
        "",
        f"**Beam search** (beam {beam['beam_size']}, batch {beam['batch']}, "
        f"{beam['sentences']} sentences: {beam['inputs']}): "
        f"**{beam['sentences_per_s']:.1f} sentences/s** ({beam['seconds']:.2f} s; "
        f"{beam['mean_output_tokens']:.1f} output tokens per sentence on average, EOS included).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="a trained default run for the beam row")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--src_len", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--smoke", action="store_true", help="tiny model and sizes (CI)")
    parser.add_argument("--out", help="write the rows as a JSON record here (common.records)")
    parser.add_argument("--docs", help=f"write the {BLOCK} block of this file (needs --out)")
    args = parser.parse_args(argv)
    if args.docs and not args.out:
        parser.error("--docs: needs --out (the block is made from the committed record)")
    head = records.header()
    if args.smoke:
        args.batch, args.src_len, args.length, args.repeats, args.sentences = 4, 8, 8, 1, 8
    config = _model_config(args.smoke)
    rows = [{"device": str(jax.devices()[0]), "backend": jax.default_backend()}]
    print(json.dumps(rows[-1]), flush=True)
    rows.append(generation_row(config, args.batch, args.src_len, args.length, args.repeats))
    print(json.dumps(rows[-1]), flush=True)
    rows.append(beam_row(config, args.workdir, args.sentences, args.batch))
    print(json.dumps(rows[-1]), flush=True)
    if args.out:
        record = records.write(args.out, {"rows": rows}, head)
        if args.docs:  # (--docs needs --out)
            records.replace_block(args.docs, BLOCK, table(record))
    return rows


if __name__ == "__main__":
    main()

"""Shared helpers: tiny model configs for every (arch, scheme) pair."""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import shutil
import tempfile

# isort: off
import deepnet_jax  # noqa: F401 (first: it imports jax with the CPU hosts' plugin noise dropped)

# isort: on
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from deepnet_jax.experiments import opening
from deepnet_jax.model import architectures, schemes
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.config import ARCHS, SCHEMES
from deepnet_jax.scale import flops

# The tests run on the CPU; the tpu and gpu-plan extras (installed for the TPU/GPU compile tests,
# which use compile-only devices) must not try to start a TPU or a CUDA backend. On a machine
# with a GPU, DEEPNET_JAX_TEST_PLATFORMS=cuda runs them there (the GPU-only tests, e.g. cuDNN's
# attention against the reference, skip elsewhere).
jax.config.update("jax_platforms", os.environ.get("DEEPNET_JAX_TEST_PLATFORMS", "cpu"))

# The "rbg" generator compiles several times faster than threefry on CPU; tests only need
# well-distributed bits, not threefry's exact stream.
jax.config.update("jax_default_prng_impl", "rbg")

# Many tests train the same tiny models again (resume, CLI, config tables, the train.py
# subprocesses of the reliability tests): one persistent compilation cache for the whole test
# run turns their repeated compiles into cache reads. The first process to load this file (the
# pytest controller) creates it and exports it through JAX's environment variables, so both
# xdist workers and every subprocess a test starts read and write the same folder; the
# controller removes it at exit.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _XLA_CACHE = tempfile.mkdtemp(prefix="deepnet_jax_test_xla_cache_")
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _XLA_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# XLA's CPU backend at LLVM optimization level 0 compiles a tiny model's train step about twice
# as fast (measured: 6.3 s -> 3.1 s for test_training's encdec step). The code it makes runs
# slower (2.7x for a 64-wide 6L-6L step), which the tests' few steps of tiny models do not
# feel: the default test run went from 1159 s to 846 s. XLA:CPU's legacy emitters of fused
# loops (``--xla_cpu_use_fusion_emitters=false``; the HLO and its fusions are the same) took
# test_training's 2-update runs from 10.6 s to 8.5 s (encdec DeepNorm) and from 8.5 s to 6.2 s
# (decoder Hyper-Connections), medians of 4 rounds, each variant in a fresh process; and
# test_training, test_schemes_since_deepnet, test_modern_blocks and test_models (150 tests,
# -n 2) from 324 and 332 s to 220 and 252 s (two rounds, alternating, at 5d4f81a and 2233756,
# nothing else running; the 2-core Intel Xeon VM). In the whole default run, where the shared
# compilation cache already saves most repeated compiles, less: 1,155 s at 5237993 and 1,103 s
# at 258a7a5 (one fresh-clone run each). Both are
# the smoke experiments' flags (``opening.FAST_COMPILE_XLA_FLAGS``). Set before the backend
# starts; subprocesses get them through ``xla_flags``.
TEST_XLA_FLAGS = " ".join(opening.FAST_COMPILE_XLA_FLAGS)
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()


def _measure_matmul_once() -> None:
    """A run on the CPU with no ``peak_flops`` measures its MFU's peak: four 2048³ float32
    matmuls (about 1.5 s at the tests' optimization level 0). The tests' in-process runs share
    one measurement per process (the same machine's figure); calls with arguments
    (test_flops) still measure."""
    measure = flops.measured_matmul_flops_per_s
    once = functools.cache(measure)

    def measured_matmul_flops_per_s(*args, **kwargs) -> float:
        return measure(*args, **kwargs) if args or kwargs else once()

    flops.measured_matmul_flops_per_s = measured_matmul_flops_per_s


_measure_matmul_once()


def xla_flags(devices: int | None = None) -> str:
    """``XLA_FLAGS`` for a test's subprocess: the tests' flags, and ``devices`` host devices."""
    forced = f" --xla_force_host_platform_device_count={devices}" if devices else ""
    return TEST_XLA_FLAGS + forced


ARCH_SCHEME = list(itertools.product(ARCHS, SCHEMES))
FAST_SCHEMES = ("deepnorm", "subln")
# The papers' schemes; those since DeepNet have their own default-run tests in every
# architecture (tests/test_schemes_since_deepnet.py) and join the generic grids under -m slow.
PAPER_SCHEMES = schemes.names(origin=schemes.PAPER)


# The papers' schemes on the encoder-decoder in the default run of the checks whose code is the
# same for every scheme but the stack's form (cached decoding, causality, padding, dropout): a
# scanned post-norm stack (DeepNorm) and the unrolled DLCL stack with its layer combination;
# the single stacks' Sub-LN adds a pre-norm stack with its final norm.
STACK_FORMS = ("deepnorm", "dlcl_post")


def arch_scheme_params(pairs=ARCH_SCHEME, encdec=PAPER_SCHEMES, single_stack=FAST_SCHEMES) -> list:
    """``pairs`` as pytest params: the ``encdec`` schemes (the papers' unless given) on the
    encoder-decoder (it holds every layer kind), the other architectures with the
    ``single_stack`` schemes (DeepNorm and Sub-LN unless given) in the default run, and the
    remaining pairs under ``-m slow`` (the same layer code behind other masks and losses)."""
    return [
        pytest.param(a, s, marks=() if _fast(a, s, encdec, single_stack) else pytest.mark.slow)
        for a, s in pairs
    ]


def _fast(arch: str, scheme: str, encdec=PAPER_SCHEMES, single_stack=FAST_SCHEMES) -> bool:
    return (arch == "encdec" and scheme in encdec) or (arch != "encdec" and scheme in single_stack)


def tiny_config(
    arch: str = "encdec", scheme: str = "deepnorm", **overrides
) -> ml_collections.ConfigDict:
    """A small model config; encoder 3 layers, decoder 2 layers where the arch has them."""
    c = architectures.default_config()
    c.arch, c.scheme = arch, scheme
    c.d_model, c.num_heads, c.ffn_dim, c.vocab_size, c.max_len = 32, 4, 64, 40, 32
    c.num_encoder_layers = 3 if arch in ("encoder", "encdec") else 0
    c.num_decoder_layers = 2 if arch in ("decoder", "encdec") else 0
    c.dropout = 0.0
    if not schemes.get(scheme).scannable:
        c.scan_layers = False
    for key, value in overrides.items():
        c[key] = value
    return c


def random_tokens(shape, vocab: int, seed: int = 0) -> jnp.ndarray:
    """Non-padding token ids in [1, vocab)."""
    return jnp.asarray(np.random.default_rng(seed).integers(1, vocab, size=shape), jnp.int32)


def model_args(arch: str, src, tgt=None) -> tuple:
    return (src, src if tgt is None else tgt) if arch == "encdec" else (src,)


@functools.cache
def built(arch: str, scheme: str, **overrides):
    """(config, model, params) for ``tiny_config(arch, scheme, **overrides)``, cached."""
    cfg = tiny_config(arch, scheme, **overrides)
    model = architectures.build(cfg)
    return cfg, model, init_params(model, arch, jnp.ones((1, 4), jnp.int32))


def init_params(model, arch: str, src, tgt=None, seed: int = 0):
    """``model_inputs.init_params`` for token arrays: ``src`` (encdec: the encoder's input,
    else the model's inputs) and the decoder's ``tgt`` (default ``src``)."""
    decoder_inputs = src if tgt is None else tgt
    batch = {"src": src, "inputs": decoder_inputs} if arch == "encdec" else {"inputs": src}
    return model_inputs.init_params(model, arch, batch, seed)


def jit_apply(model):
    """``model.apply`` under jit (eager scan/remat dispatch is slow on CPU)."""
    return jax.jit(model.apply, static_argnames=("deterministic",))


# The modules that take longest, first: the two xdist workers take whole modules in collection
# order, so starting with the long ones keeps one worker from finishing far behind the other.
LONG_MODULES = (
    "test_sharding.py",
    "test_reliability.py",
    "test_experiments.py",
    "test_cli.py",
    "test_checkpoint.py",
    "test_training.py",
    "test_diagnostics.py",
)


def pytest_collection_modifyitems(items: list) -> None:
    def rank(item) -> int:
        name = item.path.name
        return LONG_MODULES.index(name) if name in LONG_MODULES else len(LONG_MODULES)

    items.sort(key=rank)  # stable: the order inside each module is kept

"""Dropout masks: the hash generator's statistics, the jax generator's equality with Flax's
Dropout, and model.dropout_rng through a model."""

from __future__ import annotations

import importlib.util
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import jit_apply, random_tokens, tiny_config

from deepnet_jax.model import architectures
from deepnet_jax.model.dropout import dropout, dropout_bits
from deepnet_jax.scale import targets

N = 1 << 20  # elements per mask: binomial standard deviation of the drop fraction ≈ 3e-4


def _mask(key, rate, shape=(N,), rng="hash"):
    return np.asarray(dropout(jnp.ones(shape), rate, key, False, rng) != 0)


@pytest.mark.parametrize("rate", [0.05, 0.1, 0.3, 0.5])
def test_hash_masks_drop_the_rate_and_rescale_the_rest(rate):
    y = np.asarray(dropout(jnp.full((N,), 2.0), rate, jax.random.key(7), False))
    dropped = np.mean(y == 0)
    sigma = np.sqrt(rate * (1 - rate) / N)
    assert abs(dropped - rate) < 5 * sigma, (dropped, rate)
    np.testing.assert_allclose(y[y != 0], 2.0 / (1 - rate), rtol=1e-6)


def test_hash_masks_are_uncorrelated_within_and_across_keys():
    """Neighbouring elements, elements a row apart and the masks of keys derived with
    fold_in (as the layers derive theirs) show no correlation beyond 5 standard errors."""
    base = jax.random.key(3)
    masks = [_mask(jax.random.fold_in(base, i), 0.1).astype(np.float64) for i in range(4)]
    limit = 5 / np.sqrt(N)  # standard error of a correlation of N independent pairs

    def corr(a, b):
        return np.corrcoef(a, b)[0, 1]

    m = masks[0]
    for lag in (1, 2, 256, 1024):
        assert abs(corr(m[:-lag], m[lag:])) < limit, lag
    for i in range(4):
        for j in range(i + 1, 4):
            assert abs(corr(masks[i], masks[j])) < limit, (i, j)
    # every bit of the hash output is balanced (the threshold reads the high bits)
    bits = np.asarray(dropout_bits(base, (N,)))
    ones = np.array([np.mean((bits >> b) & 1) for b in range(32)])
    assert np.all(np.abs(ones - 0.5) < 5 * 0.5 / np.sqrt(N)), ones


def _lowbias32(h: np.ndarray) -> np.ndarray:
    for shift, multiplier in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
        h = h ^ (h >> np.uint32(shift))
        if multiplier is not None:
            h = h * np.uint32(multiplier)  # uint32 arithmetic wraps, as the hash's does
    return h


@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (4, 1, 6, 5), (2, 0, 3)])
def test_hash_bits_hash_each_elements_flat_index(shape):
    """lowbias32(lowbias32(i ⊕ k0) + k1) of each element's row-major flat index i (NumPy)."""
    key = jax.random.key(3)
    k0, k1 = np.asarray(jax.random.bits(key, (2,), jnp.uint32))
    index = np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape)
    with np.errstate(over="ignore"):
        want = _lowbias32(_lowbias32(index ^ k0) + k1)
    np.testing.assert_array_equal(np.asarray(dropout_bits(key, shape)), want)


@pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)
def test_a_scanned_layers_masks_read_no_counter_array_on_a_gpu():
    """Compiled for an H100 (deviceless), the gradient of a scanned, rematerialized layer with
    dropout carries no full-size uint32 array into its loops: each mask's index is counted
    where the mask is drawn, not read from memory (dropout._flat_index)."""
    b, t, d, layers = 4, 8, 16, 3

    def layer(x, xs):
        w, key = xs
        return x + dropout(jnp.tanh(x @ w), 0.1, key, False), None

    def loss(ws, x, keys):
        body = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_saveable)
        return jnp.sum(jax.lax.scan(body, x, (ws, keys))[0].astype(jnp.float32) ** 2)

    device = targets.compile_devices(targets.parse("h100-1"))[0]
    on = jax.sharding.SingleDeviceSharding(device)
    raw_key = jax.random.key_data(jax.random.key(0))  # the session's PRNG's raw key
    shapes = [((layers, d, d), jnp.bfloat16), ((b, t, d), jnp.bfloat16)]
    shapes.append(((layers, *raw_key.shape), raw_key.dtype))
    args = [jax.ShapeDtypeStruct(s, dtype, sharding=on) for s, dtype in shapes]
    hlo = jax.jit(jax.grad(loss)).lower(*args).compile().as_text()
    states = re.findall(r"= \(([^\n]*?)\) while\(", hlo)
    assert states  # the forward and the backward scan
    carried = [dims for state in states for dims in re.findall(r"u32\[([\d,]*)\]", state)]
    assert all(math.prod(int(n) for n in dims.split(",") if n) < b * t * d for dims in carried)


def test_hash_masks_depend_on_the_key_only():
    a = jax.random.key(1)
    np.testing.assert_array_equal(_mask(a, 0.2), _mask(a, 0.2))
    assert np.mean(_mask(a, 0.2) != _mask(jax.random.key(2), 0.2)) > 0.25
    # any key implementation, and raw uint32 keys (of the default implementation)
    for impl in ("threefry2x32", "rbg", "philox4x32"):
        key = jax.random.key(5, impl=impl)
        assert abs(np.mean(~_mask(key, 0.1)) - 0.1) < 5 * np.sqrt(0.09 / N), impl
    typed = jax.random.key(5)
    np.testing.assert_array_equal(_mask(jax.random.key_data(typed), 0.1), _mask(typed, 0.1))


def test_jax_masks_are_flax_dropout_masks():
    x = jax.random.normal(jax.random.key(0), (4, 16, 32))
    key = jax.random.key(11)
    ours = dropout(x, 0.3, key, False, rng="jax")
    flax_out = nn.Dropout(0.3).apply({}, x, deterministic=False, rng=key)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(flax_out))


def test_deterministic_or_zero_rate_is_the_identity_and_a_missing_key_is_an_error():
    x = jnp.arange(6.0)
    assert dropout(x, 0.5, None, True) is x
    assert dropout(x, 0.0, None, False) is x
    with pytest.raises(ValueError, match="needs a key"):
        dropout(x, 0.5, None, False)
    with pytest.raises(ValueError, match=r"rate=1\.0 must be in \[0, 1\)"):
        dropout(x, 1.0, jax.random.key(0), False)
    with pytest.raises(ValueError, match=r"allowed values are \('hash', 'jax'\)"):
        dropout(x, 0.5, jax.random.key(0), False, rng="philox")


@pytest.mark.parametrize("rng", ["hash", "jax"])
def test_model_dropout_rng_draws_different_masks_per_key_and_none_in_eval(rng):
    cfg = tiny_config(
        "encdec", dropout=0.3, attention_dropout=0.1, activation_dropout=0.1, dropout_rng=rng
    )
    model = architectures.build(cfg)
    src = random_tokens((2, 6), cfg.vocab_size)
    params = model.init(jax.random.key(0), src, src)["params"]
    fwd = jit_apply(model)

    def run(det, k):
        rngs = {"dropout": jax.random.key(k)}
        return np.asarray(fwd({"params": params}, src, src, deterministic=det, rngs=rngs))

    np.testing.assert_array_equal(run(False, 0), run(False, 0))
    assert np.abs(run(False, 0) - run(False, 1)).max() > 1e-3
    np.testing.assert_array_equal(run(True, 0), run(True, 1))


def test_bad_dropout_rng_is_rejected_before_tracing():
    with pytest.raises(ValueError, match=r"model\.dropout_rng='philox' is invalid: allowed"):
        architectures.build(tiny_config("decoder", dropout_rng="philox"))

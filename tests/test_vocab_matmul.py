"""The output projection's matmul (deepnet_jax.model.vocab_matmul): float32 logits forward, the
compute dtype's matmuls backward. Forward bitwise the plain einsum's; float32 operands give the
plain einsum's gradients exactly; bfloat16 gradients within bfloat16's own rounding of the
float32 ones, bounded from the rounding, not from one run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from deepnet_jax.model.vocab_matmul import vocab_logits

U = 2.0**-8  # bfloat16's unit roundoff: 8 significant bits, round to nearest


def _operands(spec: str, dtype):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k1, (2, 5, 16)).astype(dtype)
    w_shape = (40, 16) if spec == "btd,vd->btv" else (16, 40)
    w = (jax.random.normal(k2, w_shape) * 0.3).astype(dtype)
    r = jax.random.normal(k3, (2, 5, 40))  # the logits' float32 gradient
    return x, w, r


def _grads(fn, x, w, r):
    return jax.grad(lambda a, b: jnp.sum(fn(a, b) * r), argnums=(0, 1))(x, w)


@pytest.mark.parametrize("spec", ["btd,vd->btv", "btd,dv->btv"])
def test_float32_is_the_plain_einsum(spec):
    x, w, r = _operands(spec, jnp.float32)

    def plain(a, b):
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)

    assert np.array_equal(vocab_logits(spec, x, w), plain(x, w))
    for got, want in zip(
        _grads(lambda a, b: vocab_logits(spec, a, b), x, w, r), _grads(plain, x, w, r), strict=True
    ):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("spec", ["btd,vd->btv", "btd,dv->btv"])
def test_bfloat16_backward_is_within_its_own_rounding(spec):
    x, w, r = _operands(spec, jnp.bfloat16)
    out = vocab_logits(spec, x, w)
    plain = jnp.einsum(spec, x, w, preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32 and np.array_equal(out, plain)  # the forward is untouched
    dx, dw = _grads(lambda a, b: vocab_logits(spec, a, b), x, w, r)
    assert dx.dtype == dw.dtype == jnp.bfloat16
    # float32 reference: dx = r·W, dW = rᵀ·x over the same (bfloat16-valued) operands
    xf, wf = x.astype(jnp.float32), w.astype(jnp.float32)
    ref_dx, ref_dw = _grads(lambda a, b: jnp.einsum(spec, a, b), xf, wf, r)
    # |Δ| ≤ u·|ref| (the result rounded) + u(1+u)·Σ|g||·| (g rounded), doubled for the f32 sums
    abs_dx, abs_dw = _grads(lambda a, b: jnp.einsum(spec, a, b), jnp.abs(xf), jnp.abs(wf), abs(r))
    for got, ref, scale in ((dx, ref_dx, abs_dx), (dw, ref_dw, abs_dw)):
        err = np.abs(np.asarray(got, np.float32) - np.asarray(ref))
        bound = 2 * U * (np.abs(np.asarray(ref)) + np.asarray(scale))
        assert (err <= bound).all(), float((err / bound).max())
    # and they are the compute dtype's matmuls: g itself was rounded (not the plain path)
    plain_dx, _ = _grads(
        lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=jnp.float32), x, w, r
    )
    assert not np.array_equal(np.asarray(dx), np.asarray(plain_dx))


def test_mixed_operands_are_refused():
    x, w, _ = _operands("btd,vd->btv", jnp.float32)
    with pytest.raises(ValueError, match="cast both"):
        vocab_logits("btd,vd->btv", x, w.astype(jnp.bfloat16))

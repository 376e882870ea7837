"""The output projection's matmul: float32 logits forward, the compute dtype backward.

``logits = einsum(spec, x, W)`` with x [B, T, D] and W ([V, D] tied, [D, V] untied) in the
compute dtype and the logits accumulated and returned in float32, which the loss needs
(log-softmax over a vocabulary of 32,000 or more). Differentiated as it stands, the float32
logits' gradient [B, T, V] is what the two backward matmuls read: on a GPU they then run in
float32 (TF32 tensor cores, half the bf16 rate) on twice the bytes. Here the gradient is cast to
the compute dtype first, as mixed-precision training does (PyTorch's autocast runs a linear
layer's backward in its forward's dtype): dx = g·W and dW = gᵀ·x are the compute dtype's
matmuls, and the gradients differ from float32 ones by the compute dtype's rounding of g (its
own error; ``tests/test_vocab_matmul.py``). The forward and the loss are unchanged.
docs/scaling.md ("Measured on one H200") has the profile behind it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def vocab_logits(spec: str, x: jax.Array, w: jax.Array) -> jax.Array:
    """float32 ``einsum(spec, x, w)`` of operands in one compute dtype; for a float16/bfloat16
    dtype the backward pass runs in it (module docstring), for float32 it is the plain einsum."""
    if x.dtype != w.dtype:
        raise ValueError(f"vocab_logits: x is {x.dtype}, w is {w.dtype}; cast both first")
    if x.dtype == jnp.float32:
        return jnp.einsum(spec, x, w, preferred_element_type=jnp.float32)
    return _low_precision_backward(spec, x, w)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _low_precision_backward(spec: str, x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.einsum(spec, x, w, preferred_element_type=jnp.float32)


def _forward(spec: str, x: jax.Array, w: jax.Array):
    return _low_precision_backward(spec, x, w), (x, w)


def _backward(spec: str, saved, g_f32: jax.Array):
    x, w = saved
    _, vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b), x, w)
    return vjp(g_f32.astype(x.dtype))


_low_precision_backward.defvjp(_forward, _backward)

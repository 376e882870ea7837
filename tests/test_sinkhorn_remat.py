"""mHC's Sinkhorn-Knopp (deepnet_jax.model.schemes.hyper.sinkhorn) is rematerialized: what its
backward pass keeps, and that its gradient is the plain iteration's; and the CPU's layout of its
iterates (docs/schemes.md, "Speed")."""

import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.model.schemes import hyper


def test_sinkhorn_keeps_only_its_logits_for_the_backward_pass(capsys):
    """Rematerialized: differentiating Sinkhorn-Knopp saves its input alone, not its
    2·iters − 1 iterates (which a scan over layers would stack), and its gradient is the
    plain unrolled iteration's, bit for bit."""
    from jax.ad_checkpoint import print_saved_residuals

    logits = jax.random.normal(jax.random.key(0), (2, 3, 4, 4))
    weights = jax.random.normal(jax.random.key(1), (2, 3, 4, 4))

    def loss(z, fn):
        return jnp.sum(fn(z, 20, 0.0) * weights)

    def saved(fn) -> list[str]:  # a line per residual of the iteration's shape (not weights),
        capsys.readouterr()  # as the logits [2,3,4,4] or with the 6 positions minor [4,4,6]
        print_saved_residuals(lambda z: loss(z, fn), logits)
        lines = capsys.readouterr().out.splitlines()
        shapes = ("[2,3,4,4]", "[4,4,6]", "[4,1,6]", "[1,4,6]")
        return [ln for ln in lines if any(s in ln for s in shapes) and "constant" not in ln]

    plain = hyper._sinkhorn_iterates.__wrapped__
    assert len(saved(hyper.sinkhorn)) == 1 and len(saved(plain)) > 20
    np.testing.assert_array_equal(
        jax.jit(jax.grad(lambda z: loss(z, hyper.sinkhorn)))(logits),
        jax.jit(jax.grad(lambda z: loss(z, plain)))(logits),
    )


def test_the_cpu_iterates_with_the_positions_minor_and_accelerators_without_transposes():
    """The CPU's lowering transposes the positions minor ([n, n, B·T]) and back; a TPU's and
    a GPU's keep [.., n, n] (no transpose). The CPU's matrices are the [.., n, n] iterations'
    to float rounding: the same sums of n terms in another order, a few ulps of values ≤ 1
    (2e-6 is 16 ulps of 1.0), and its gradient likewise."""
    logits = jax.random.normal(jax.random.key(0), (2, 3, 4, 4)) * 3.0
    weights = jax.random.normal(jax.random.key(1), (2, 3, 4, 4))
    lowered = jax.jit(lambda z: hyper.sinkhorn(z, 20)).trace(logits)
    for platform, transposes in (("cpu", 2), ("tpu", 0), ("cuda", 0)):
        text = lowered.lower(lowering_platforms=(platform,)).as_text()
        assert text.count("stablehlo.transpose") == transposes, platform

    def matrices_minor(z):
        return hyper._iterations(z, 20, 0.0, columns=-2, rows=-1)

    np.testing.assert_allclose(hyper.sinkhorn(logits, 20), matrices_minor(logits), atol=2e-6)
    grads = [jax.grad(lambda z, f=f: jnp.sum(f(z) * weights))(logits)
             for f in (lambda z: hyper.sinkhorn(z, 20), matrices_minor)]  # fmt: skip
    np.testing.assert_allclose(*grads, atol=2e-6 * float(jnp.max(jnp.abs(grads[1]))))

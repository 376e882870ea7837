"""Analytic FLOP counts against two independent counts of the real model, and the MFU peak.

1. Exact: every ``dot_general`` in the traced program (jaxpr, recursing into scan/remat/jit
   sub-programs, × scan length), 2·(output size)·(contracted size) each. The analytic count must
   equal it to the FLOP, forward and training (grad) alike.
2. Approximate: XLA's ``cost_analysis()["flops"]`` of the compiled forward pass. XLA also counts
   one FLOP per element of every elementwise op (LayerNorm, softmax, biases, ReLU, residual adds),
   which the analytic count leaves out by definition; for a matmul-dominated model (d=128,
   F=512, T=16) that is ~1.4% (per token per layer ≈ 5k elementwise vs. ≈ 400k matmul FLOPs),
   so the analytic count must lie in [0.97, 1.0] × XLA's.
"""

import math
from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config
from jax.extend import core

from deepnet_jax.data import synthetic
from deepnet_jax.model import architectures
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale import flops
from deepnet_jax.training import losses

B, T, S = 4, 16, 12
ARCHS = ("encoder", "decoder", "encdec")


def _typed(arch: str, **overrides) -> TransformerConfig:
    """``tiny_config`` as the frozen config flops.py takes (a run's ``RunConfig.model``)."""
    return TransformerConfig.from_config(tiny_config(arch, **overrides))


def _dot_flops(jaxpr) -> int:
    """2·|out|·|contracted| summed over every dot_general of ``jaxpr`` and its sub-jaxprs."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contract_lhs, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            out_size = math.prod(eqn.outvars[0].aval.shape)
            total += 2 * out_size * math.prod(lhs_shape[i] for i in contract_lhs)
        times = eqn.params["length"] if eqn.primitive.name == "scan" else 1
        for sub in core.jaxprs_in_params(eqn.params):
            total += times * _dot_flops(sub)
    return total


def _setup(arch, scheme="pre_ln", **overrides):
    cfg = TransformerConfig.from_config(tiny_config(arch, scheme, max_len=64, **overrides))
    model = architectures.build(cfg)
    rng = np.random.default_rng(0)
    tgt = jnp.asarray(rng.integers(1, cfg.vocab_size, (B, T)), jnp.int32)
    src = jnp.asarray(rng.integers(1, cfg.vocab_size, (B, S)), jnp.int32)
    args = (src, tgt) if arch == "encdec" else (tgt,)
    shapes = {"inputs": (B, T), "targets": (B, T), "weights": (B, T)}
    if arch == "encdec":
        shapes["src"] = (B, S)
    # Shapes suffice for tracing and lowering: no initialization is compiled or run.
    params = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), *args)["params"])
    return cfg, model, params, args, shapes


def _forward(model):
    return lambda p, *a: model.apply({"params": p}, *a)


def _grad(model, tgt):
    def loss(p, *a):
        return losses.cross_entropy(model.apply({"params": p}, *a), tgt, jnp.ones(tgt.shape))[0]

    return jax.grad(loss)


VARIANTS = [
    {"scheme": "pre_ln", "scan_layers": False, "remat_policy": "none"},
    {"scheme": "deepnorm", "scan_layers": True, "remat_policy": "none"},
    {"scheme": "subln", "scan_layers": True, "remat_policy": "none", "tie_embeddings": True},
    {  # the modern blocks: a gated FFN, grouped-query attention, rotary positions, QK-norm
        "scheme": "deepnorm",
        "scan_layers": True,
        "remat_policy": "none",
        "activation": "swiglu",
        "num_kv_heads": 2,
        "positions": "rope",
        "qk_norm": True,
        "norm": "rmsnorm",
    },
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v["scheme"] + v.get("activation", ""))
@pytest.mark.parametrize("arch", ARCHS)
def test_forward_and_train_flops_equal_the_traced_matmuls(arch, variant):
    cfg, model, params, args, shapes = _setup(arch, **variant)
    forward = _dot_flops(jax.make_jaxpr(_forward(model))(params, *args).jaxpr)
    assert flops.forward_flops(cfg, shapes) == forward
    train = _dot_flops(jax.make_jaxpr(_grad(model, args[-1]))(params, *args).jaxpr)
    assert flops.train_flops_per_step(cfg, shapes) == train == 3 * forward


def test_remat_recomputation_is_not_counted():
    cfg, model, params, args, shapes = _setup("decoder", remat_policy="full")
    traced = _dot_flops(jax.make_jaxpr(_grad(model, args[-1]))(params, *args).jaxpr)
    analytic = flops.train_flops_per_step(cfg, shapes)
    # Full remat recomputes the layers' forward matmuls in the backward pass (at most all of
    # them; never the output projection, which is outside the remat'd layers).
    layers_forward = flops.forward_flops(cfg, shapes) - 2 * B * T * cfg.d_model * cfg.vocab_size
    assert analytic < traced <= analytic + layers_forward


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_flops_close_to_xla_cost_analysis(arch):
    cfg, model, params, args, shapes = _setup(
        arch,
        d_model=128,
        num_heads=4,
        ffn_dim=512,
        vocab_size=64,
        scan_layers=False,
        remat_policy="none",
    )
    cost = jax.jit(_forward(model)).lower(params, *args).compile().cost_analysis()
    xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
    ratio = flops.forward_flops(cfg, shapes) / xla
    assert 0.97 <= ratio <= 1.0, ratio


@pytest.mark.parametrize("arch", ARCHS)
def test_matmul_params_are_the_model_kernels(arch):
    modern = {"activation": "geglu", "num_kv_heads": 1}  # 3 FFN matrices, one kv head
    for tie, blocks in ((False, {}), (True, {}), (False, modern)):
        cfg, _, params, _, _ = _setup(arch, tie_embeddings=tie, **blocks)
        leaves = jax.tree_util.tree_leaves_with_path(params)
        kernels = sum(
            x.size for path, x in leaves if jax.tree_util.keystr(path).endswith("['kernel']")
        )
        table = cfg.vocab_size * cfg.d_model if tie else 0  # the tied table is the projection
        assert flops.matmul_params(cfg) == kernels + table


def test_formula_by_hand_for_an_encdec_batch():
    cfg = _typed("encdec", num_encoder_layers=2, num_decoder_layers=3)
    d, f, v = cfg.d_model, cfg.ffn_dim, cfg.vocab_size  # 32, 64, 40
    b, t, s = 2, 5, 7
    encoder = 2 * b * s * (8 * d * d + 4 * d * f + 4 * s * d)
    decoder = 3 * b * t * (8 * d * d + 4 * d * f + 4 * t * d)
    cross = 3 * (b * t * (4 * d * d + 4 * s * d) + b * s * 4 * d * d)
    shapes = {"src": (b, s), "inputs": (b, t)}
    assert flops.forward_flops(cfg, shapes) == encoder + decoder + cross + 2 * b * t * d * v


@pytest.mark.parametrize("arch", ARCHS)
def test_real_batches_are_accepted(arch):
    cfg = _typed(arch)
    batch = synthetic.batch(arch, 3, cfg.vocab_size, 10, np.random.default_rng(0))
    shapes = {name: x.shape for name, x in batch.items()}
    S = 10 if arch == "encdec" else 0
    assert flops.sequence_shapes(cfg, shapes) == (3, 10, S)
    assert flops.train_flops_per_step(cfg, shapes) > 0


@pytest.mark.parametrize(
    ("arch", "shapes", "message"),
    [
        ("encdec", {"inputs": (2, 3)}, "lack src for model.arch='encdec'"),
        ("decoder", {"targets": (2, 3)}, "lack inputs"),
        ("encoder", {"inputs": (2, 3, 4)}, r"must be \[batch, length\]"),
        ("encdec", {"src": (3, 5), "inputs": (2, 3)}, "3 rows but batch\\['inputs'\\] has 2"),
        ("decoder", {"inputs": (2, 3), "targets": (2, 4)}, "must match"),
    ],
)
def test_bad_batch_shapes_are_named(arch, shapes, message):
    with pytest.raises(ValueError, match=message):
        flops.forward_flops(_typed(arch), shapes)


def test_peak_flops_override_table_and_measurement(monkeypatch):
    assert flops.peak_flops_per_device(3e12) == (3e12, "config")
    peak, source = flops.peak_flops_per_device()
    assert jax.local_devices()[0].platform == "cpu"
    assert source == "measured fp32 matmul"
    assert 1e8 < peak < 1e14  # two CPU cores: ~1e11

    def fake(platform, kind):
        device = SimpleNamespace(platform=platform, device_kind=kind)
        monkeypatch.setattr(jax, "local_devices", lambda: [device])
        return flops.peak_flops_per_device()

    h100 = "NVIDIA H100 80GB HBM3"
    assert fake("gpu", h100) == (989e12, f"table:{h100}")
    assert fake("gpu", "NVIDIA H100 PCIe")[0] == 756e12
    assert fake("gpu", "NVIDIA A100-SXM4-80GB")[0] == 312e12
    assert fake("tpu", "TPU v5 lite") == (197e12, "table:TPU v5 lite")
    assert fake("tpu", "TPU v5")[0] == 459e12
    assert fake("tpu", "TPU v6 lite")[0] == 918e12
    monkeypatch.setattr(flops, "measured_matmul_flops_per_s", lambda: 1.0)
    assert fake("tpu", "TPU v4 lite") == (1.0, "measured fp32 matmul")  # not tabulated


def test_measured_matmul_rate_is_positive():
    assert flops.measured_matmul_flops_per_s(jnp.float32, size=256, repeats=2) > 1e7
    with pytest.raises(ValueError, match="must be >= 1"):
        flops.measured_matmul_flops_per_s(size=0)

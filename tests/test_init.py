"""Initialization statistics: every kernel's std equals gain·√(2/(fan_in+fan_out)) (SPEC.md)."""

import math

import numpy as np
import pytest
from conftest import arch_scheme_params, init_params, random_tokens, tiny_config
from flax.traverse_util import flatten_dict

from deepnet_jax.model import architectures, constants

D, F = 256, 1024
N, M = 4, 3  # unequal depths, so encoder and decoder gains differ


def expected_gains(arch: str, scheme: str) -> dict[str, dict[str, float]]:
    """side -> {projection: gain} for self-attention, cross-attention and FFN kernels."""
    sides = {"encoder": ("encoder",), "decoder": ("decoder",), "encdec": ("encoder", "decoder")}
    n = N if arch != "decoder" else 0
    m = M if arch != "encoder" else 0
    out = {}
    for side in sides[arch]:
        g = 1.0
        if scheme == "deepnorm":
            g = constants.deepnorm(arch, n, m)[side]["beta"]
        elif scheme == "subln":
            g = constants.subln(arch, n, m)[side]["gamma"]
        cross = g if scheme == "deepnorm" else 1.0
        out[side] = {
            "self_attn/q_proj": 1.0,
            "self_attn/k_proj": 1.0,
            "self_attn/v_proj": g,
            "self_attn/out_proj": g,
            "ffn/fc1": g,
            "ffn/fc2": g,
        }
        if arch == "encdec" and side == "decoder":
            out[side] |= {
                "cross_attn/q_proj": 1.0,
                "cross_attn/k_proj": 1.0,
                "cross_attn/v_proj": cross,
                "cross_attn/out_proj": cross,
            }
    return out


FANS = {
    "q_proj": (D, D),
    "k_proj": (D, D),
    "v_proj": (D, D),
    "out_proj": (D, D),
    "fc1": (D, F),
    "fc2": (F, D),
}


@pytest.mark.parametrize("arch, scheme", arch_scheme_params())
def test_kernel_std_matches_gain(arch, scheme):
    cfg = tiny_config(
        arch,
        scheme,
        d_model=D,
        num_heads=8,
        ffn_dim=F,
        num_encoder_layers=N if arch != "decoder" else 0,
        num_decoder_layers=M if arch != "encoder" else 0,
    )
    model = architectures.build(cfg)
    tokens = random_tokens((1, 4), cfg.vocab_size)
    flat = flatten_dict(init_params(model, arch, tokens), sep="/")
    checked = 0
    for side, gains in expected_gains(arch, scheme).items():
        for proj, gain in gains.items():
            # every layer of this side: "side/layers/proj/kernel" or "side/layers_i/proj/kernel"
            parts = [
                np.asarray(v).ravel()
                for k, v in flat.items()
                if k.startswith(f"{side}/layers") and k.endswith(f"/{proj}/kernel")
            ]
            depth = N if side == "encoder" else M
            values = np.concatenate(parts)
            fan_in, fan_out = FANS[proj.split("/")[1]]
            assert values.size == depth * fan_in * fan_out, (side, proj)
            want = gain * math.sqrt(2.0 / (fan_in + fan_out))
            got = float(np.sqrt(np.mean(values.astype(np.float64) ** 2)))
            assert got == pytest.approx(want, rel=0.03), (side, proj, got, want)
            assert abs(values.mean()) < 0.05 * want
            checked += 1
    assert checked == {"encoder": 6, "decoder": 6, "encdec": 16}[arch]


def test_xavier_gain_enters_squared():
    """variance_scaling gets g², so std scales with g (not √g)."""
    import jax

    from deepnet_jax.model.initializers import xavier_normal

    w = xavier_normal(0.25)(jax.random.key(0), (512, 512))
    assert float(w.std()) == pytest.approx(0.25 * math.sqrt(2 / 1024), rel=0.02)

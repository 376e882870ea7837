"""Initialization statistics: every kernel's std equals gain·√(2/(fan_in+fan_out))
(DeepNet Section 4.3; Magneto Section 3.2)."""

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


def fans(d: int, f: int) -> dict[str, tuple[int, int]]:
    """projection -> (fan_in, fan_out) at width ``d`` and FFN width ``f``."""
    return {
        "q_proj": (d, d),
        "k_proj": (d, d),
        "v_proj": (d, d),
        "out_proj": (d, d),
        "fc1": (d, f),
        "fc2": (f, d),
    }


FANS = fans(D, F)
# test_kernel_std_matches_gain's widths (half of D, F: a quarter of the draws to make): its
# smallest pool, one attention kernel over the decoder's M layers, holds 3·128² = 49,152 normal
# draws, so 1σ of the estimated std is ≈ 1/√(2n) ≈ 0.32% (its 3% is > 9σ) and 1σ of the mean
# is 1/√n ≈ 0.45% of the std (its 5% is > 11σ)
STD_D, STD_F = 128, 512


# Post-LN's and Pre-LN's gain 1 is the base scheme's: the default run checks it through their
# per-layer forms in the DLCL stacks (dlcl_post, dlcl_pre), the scanned stacks' gains through
# DeepNorm and Sub-LN; their own runs are under -m slow
@pytest.mark.parametrize(
    "arch, scheme", arch_scheme_params(encdec=("deepnorm", "subln", "dlcl_pre", "dlcl_post"))
)
def test_kernel_std_matches_gain(arch, scheme):
    cfg = tiny_config(
        arch,
        scheme,
        d_model=STD_D,
        num_heads=8,
        ffn_dim=STD_F,
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
            fan_in, fan_out = fans(STD_D, STD_F)[proj.split("/")[1]]
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


@pytest.mark.parametrize("scheme, fused", [("post_ln", False), ("deepnorm", True)])
def test_fairseq_init_matches_fairseqs_transformer(scheme, fused):
    """init="fairseq" (fairseq's MultiheadAttention.reset_parameters and nn.Linear FFN):
    q/k/v kernels U(±(g/√2)·√(6/(2D))), biases U(±1/√D); out_proj U(±g·√(6/(2D))), bias 0;
    fc1/fc2 kernels U(±g/√fan_in), biases U(±1/√fan_in); embeddings N(0, 1/D), padding row 0.
    Each kernel pools ≥ 3·65,536 uniform draws (1σ of the std ≈ 0.15%): 2% is > 10σ; each bias
    pools ≥ 3·256 draws (1σ ≈ 1.6%): 10% is > 6σ. A uniform's std is its bound/√3, and its
    largest draw is within 1% of the bound at these sizes (P(miss) = 0.99^768 < 1e-3 per bias,
    ~0 per kernel)."""
    cfg = tiny_config(
        "encdec",
        scheme,
        d_model=D,
        num_heads=8,
        ffn_dim=F,
        num_encoder_layers=N,
        num_decoder_layers=M,
        init="fairseq",
        fused_qkv=fused,
    )
    tokens = random_tokens((1, 4), cfg.vocab_size)
    flat = flatten_dict(init_params(architectures.build(cfg), "encdec", tokens), sep="/")

    def pooled(side: str, proj: str, leaf: str, slice_index: int | None = None) -> np.ndarray:
        parts = []
        for key, value in flat.items():
            if key.startswith(f"{side}/layers") and key.endswith(f"/{proj}/{leaf}"):
                value = np.asarray(value, np.float64)
                if slice_index is not None:  # [L,] D, 3, H, K kernel or [L,] 3, H, K bias
                    value = np.take(value, slice_index, axis=value.ndim - 3)
                parts.append(value.ravel())
        return np.concatenate(parts)

    def check_uniform(values: np.ndarray, bound: float, rel: float, what) -> None:
        assert np.abs(values).max() <= bound * (1 + 1e-6), what
        assert np.abs(values).max() > 0.99 * bound, what
        assert values.std() == pytest.approx(bound / math.sqrt(3), rel=rel), what

    checked = 0
    for side, gains in expected_gains("encdec", scheme).items():
        for proj, gain in gains.items():
            attn, name = proj.split("/")
            fan_in = FANS[name][0]
            if name == "out_proj":
                check_uniform(pooled(side, proj, "kernel"), gain * math.sqrt(3 / D), 0.02, proj)
                assert not pooled(side, proj, "bias").any(), (side, proj)
            elif name in ("fc1", "fc2"):
                check_uniform(pooled(side, proj, "kernel"), gain / math.sqrt(fan_in), 0.02, proj)
                check_uniform(pooled(side, proj, "bias"), 1 / math.sqrt(fan_in), 0.10, proj)
            else:
                index = ("q_proj", "k_proj", "v_proj").index(name)
                fuse = fused and attn == "self_attn"
                where = (f"{attn}/qkv_proj", index) if fuse else (proj, None)
                bound = gain * 2**-0.5 * math.sqrt(3 / D)
                check_uniform(pooled(side, where[0], "kernel", where[1]), bound, 0.02, proj)
                bias = pooled(side, where[0], "bias", where[1])
                check_uniform(bias, 1 / math.sqrt(D), 0.10, proj)
            checked += 1
    assert checked == 16
    for side in ("encoder", "decoder"):
        table = np.asarray(flat[f"{side}_embed_tokens/embedding"], np.float64)
        assert not table[0].any()
        assert table[1:].std() == pytest.approx(D**-0.5, rel=0.03)

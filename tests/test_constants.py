"""DeepNorm and Sub-LN constants against hand-computed values
(DeepNet Figure 2b; Magneto Section 3.2)."""

import math

import pytest

from deepnet_jax.model import constants

# (arch, N, M) -> {side: (alpha, beta)}; the papers' formulas evaluated independently as
# exp/log sums (e.g. 0.81·exp((4·ln N + ln M)/16)), rounded to 6 decimals.
DEEPNORM = {
    ("encoder", 6, 0): {"encoder": (1.861210, 0.379918)},  # (12)^(1/4), (48)^(-1/4)
    ("decoder", 0, 50): {"decoder": (3.162278, 0.223607)},  # (100)^(1/4), (400)^(-1/4)
    ("encdec", 6, 6): {"encoder": (1.417938, 0.496989), "decoder": (2.059767, 0.343295)},
    ("encdec", 30, 6): {"encoder": (2.120312, 0.332357), "decoder": (2.059767, 0.343295)},
    ("encdec", 500, 500): {"encoder": (5.648240, 0.124765), "decoder": (6.223330, 0.113622)},
}
SUBLN = {
    ("encoder", 12, 0): {"encoder": 1.782710},  # sqrt(ln 24)
    ("decoder", 0, 24): {"decoder": 1.967537},  # sqrt(ln 48)
    ("encdec", 6, 6): {"encoder": 1.547288, "decoder": 1.700109},
    ("encdec", 30, 6): {"encoder": 1.986133, "decoder": 1.700109},
}


@pytest.mark.parametrize("key", list(DEEPNORM))
def test_deepnorm_table(key):
    arch, n, m = key
    got = constants.deepnorm(arch, n, m)
    assert set(got) == set(DEEPNORM[key])
    for side, (alpha, beta) in DEEPNORM[key].items():
        assert got[side]["alpha"] == pytest.approx(alpha, rel=1e-5)
        assert got[side]["beta"] == pytest.approx(beta, rel=1e-5)


@pytest.mark.parametrize("key", list(SUBLN))
def test_subln_table(key):
    arch, n, m = key
    got = constants.subln(arch, n, m)
    assert set(got) == set(SUBLN[key])
    for side, gamma in SUBLN[key].items():
        assert got[side]["gamma"] == pytest.approx(gamma, rel=1e-5)


def test_encdec_encoder_beta_is_not_torchscales():
    """The paper's 0.87·(N⁴M)^(-1/16), not torchscale's 1.15·(N⁴M)^(-1/16) (DeepNet Figure 2b)."""
    beta = constants.deepnorm("encdec", 18, 18)["encoder"]["beta"]
    assert beta == pytest.approx(0.87 * (18**5) ** (-1 / 16))
    assert not math.isclose(beta, 1.15 * (18**5) ** (-1 / 16), rel_tol=0.1)


@pytest.mark.parametrize("fn", [constants.deepnorm, constants.subln])
@pytest.mark.parametrize(
    "args, match",
    [
        (("bert", 6, 0), "arch='bert'"),
        (("encoder", 0, 0), "num_encoder_layers=0"),
        (("decoder", 6, 0), "num_decoder_layers=0"),
        (("encdec", 6, -1), "num_decoder_layers=-1"),
        (("encoder", 6.5, 0), "num_encoder_layers=6.5"),
        (("decoder", 0, True), "num_decoder_layers=True"),
    ],
)
def test_bad_arguments(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)

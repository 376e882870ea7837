"""model.attention_impl='auto' (a training config's default): cuDNN's fused attention where it
applies on a GPU, splash on a TPU, the reference elsewhere (deepnet_jax.training.attention_auto)."""

from __future__ import annotations

import pytest
from test_training import small_config

from deepnet_jax.training import attention_auto
from deepnet_jax.training import config as train_config
from deepnet_jax.training.run_config import RunConfig


def _config(bucket_boundaries=(4, 8), **model) -> RunConfig:
    c = small_config("encdec", "deepnorm")
    c.model.attention_impl = "auto"
    c.model.dtype = "bfloat16"
    c.data.max_len, c.data.bucket_boundaries = 12, bucket_boundaries
    for name, value in model.items():
        c.model[name] = value
    return RunConfig.from_config(c)


def test_a_training_config_defaults_to_auto():
    assert train_config.default_config().model.attention_impl == "auto"


@pytest.mark.parametrize(
    "platform, model, want",
    [
        ("gpu", {}, "cudnn"),  # a run on its own NVIDIA GPUs
        ("cuda", {}, "cudnn"),  # a deviceless GPU target
        ("cpu", {}, "reference"),
        ("tpu", {}, "splash"),  # Pallas' flash attention (test_splash_attention.py)
        ("gpu", {"dtype": "float32"}, "reference"),  # cuDNN's kernels take no float32
        ("gpu", {"attention_dropout": 0.1}, "reference"),  # nor dropout on the probabilities
    ],
)
def test_cudnn_where_it_applies_else_the_reference(platform, model, want, monkeypatch):
    monkeypatch.setattr(attention_auto, "cudnn_answers", lambda: True)  # as on a GPU host
    config = _config(**model)
    assert attention_auto.resolve(config, platform).model.attention_impl == want
    assert config.model.attention_impl == "auto"  # the caller's config is left as it was


def test_odd_batch_lengths_keep_the_reference(monkeypatch):
    """cuDNN's masked training kernels refuse odd lengths: a bucket of 7 keeps the reference."""
    monkeypatch.setattr(attention_auto, "cudnn_answers", lambda: True)
    config = _config(bucket_boundaries=(7,))
    assert attention_auto.resolve(config, "gpu").model.attention_impl == "reference"


def test_a_named_kernel_is_kept():
    config = _config(attention_impl="xla")
    assert attention_auto.resolve(config, "gpu") is config


def test_without_cudnns_library_a_gpu_plan_takes_the_reference(monkeypatch):
    """A deviceless plan for a GPU on a host without cuDNN's library (no ``cudnn-plan`` extra)
    cannot trace cuDNN's attention: auto plans the reference there."""
    from jax._src.cudnn import fused_attention_stablehlo

    def missing() -> int:
        raise RuntimeError("cuDNN not found.")

    monkeypatch.setattr(fused_attention_stablehlo, "check_cudnn_version", missing)
    assert not attention_auto.cudnn_answers()
    assert attention_auto.resolve(_config(), "cuda").model.attention_impl == "reference"

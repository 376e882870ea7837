"""Training curves: a PNG with one panel, or two when validation BLEU was recorded."""

import struct

import pytest

from deepnet_jax.runs import metrics, plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    """(width, height) in pixels from the PNG signature and IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def _write(workdir, records):
    writer = metrics.MetricsWriter(str(workdir))
    for split, step, values in records:
        writer.write(split, step, values)
    writer.close()


def test_curves_with_bleu_have_two_panels(tmp_path):
    _write(
        tmp_path,
        [("train", s, {"loss": 3.0 / s, "nll": 2.5 / s, "lr": 1e-3}) for s in (1, 2, 3)]
        + [
            ("eval", 2, {"loss": 1.4, "perplexity": 4.1, "accuracy": 0.5, "bleu": 3.0}),
            ("eval", 3, {"loss": 1.2, "perplexity": 3.3, "accuracy": 0.6, "bleu": 7.0}),
            ("test", 3, {"bleu": 6.5, "chrf": 30.0}),
        ],
    )
    path = plots.plot_curves(str(tmp_path))
    assert path == str(tmp_path / "curves.png")
    assert _png_size(path) == (1100, 400)  # 11 × 4 inches at 100 dpi


def test_curves_without_bleu_have_one_panel(tmp_path):
    _write(
        tmp_path,
        [("train", 5, {"loss": 2.0}), ("train", 10, {"loss": 1.0}), ("eval", 10, {"loss": 1.1})],
    )
    path = plots.plot_curves(str(tmp_path), str(tmp_path / "lm.png"))
    assert path == str(tmp_path / "lm.png")
    assert _png_size(path) == (600, 400)
    assert not (tmp_path / "curves.png").exists()


def test_curves_need_training_records(tmp_path):
    _write(tmp_path, [("eval", 3, {"loss": 1.2})])
    with pytest.raises(ValueError, match="no training records"):
        plots.plot_curves(str(tmp_path))
    assert not (tmp_path / "curves.png").exists()

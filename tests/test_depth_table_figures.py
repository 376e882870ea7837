"""The depth table's figures (:mod:`depth_table_plot`, :mod:`depth_table_costs`' onsets) mark
the devices as its tables do (:mod:`depth_table_plot_devices`): where a panel's runs ran on two
kinds of device each depth's tick names its device, a scheme's line breaks at a device change
and a cell off its depth's device is named; a panel on one device (or none recorded) has no
marks."""

from __future__ import annotations

import pytest

from deepnet_jax.experiments import depth_table_costs as costs
from deepnet_jax.experiments import depth_table_plot as dtp
from deepnet_jax.experiments import depth_table_plot_devices as plot_devices
from deepnet_jax.experiments import report

H100 = "NVIDIA H100 80GB HBM3"
# post_ln on the H100 at 6 and 18 layers, on the CPU at 50; dlcl_pre's 18L cell on the CPU
# under a column most of whose cells ran on the H100 (the quick table's reversal panel in small)
CELLS = {
    ("post_ln", 6): H100,
    ("post_ln", 18): H100,
    ("post_ln", 50): "cpu",
    ("dlcl_pre", 6): H100,
    ("dlcl_pre", 18): "cpu",
    ("pre_ln", 18): H100,
    ("pre_ln", 50): "cpu",
}
SETTINGS = {
    "updates": 100,
    "grid": {"tasks": ["reversal"], "seeds": [0, 1]},
    "levels": {"reversal": {"unigram_entropy": 2.4, "chance": {"accuracy": 0.1, "nll": 2.3}}},
}


def _runs(device_of=lambda d: d):
    """Two seeds a cell, each leaving chance at update 25 and reaching 0.9 at 75."""
    return [
        {
            "task": "reversal",
            "scheme": scheme,
            "layers": n,
            "seed": seed,
            "lr": 1e-3,
            "warmup": 50,
            "verdict": "trained",
            "eval_accuracy": 0.5 + n / 100 + seed / 100,
            "device": device_of(device),
            "records": [
                {"split": "train", "step": 25 * (i + 1), "accuracy": a, "nll": 1.0}
                for i, a in enumerate([0.3, 0.6, 0.95, 0.97])
            ],
        }
        for (scheme, n), device in CELLS.items()
        for seed in range(2)
    ]


def _figure(draw, runs, monkeypatch, tmp_path):
    """The figure ``draw`` (:func:`dtp.plot` or :func:`costs.onset_plot`) makes of ``runs``,
    kept open (``report.save_figure`` closes it)."""
    kept = []
    monkeypatch.setattr(report, "save_figure", lambda fig, out, name: kept.append(fig) or name)
    draw(runs, SETTINGS, str(tmp_path), "fig")
    return kept[0]


def _pieces(ax, scheme):
    """The depths of each drawn piece of ``scheme``'s line (its color's errorbar lines)."""
    color = dtp.style(scheme, list(dtp.COLORS))["color"]
    lines = [c.lines[0] for c in ax.containers if c.lines[0].get_color() == color]
    return [[int(x) for x in line.get_xdata()] for line in lines]


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []


@pytest.mark.parametrize("draw", [dtp.plot, costs.onset_plot], ids=["metric", "onsets"])
def test_a_panel_on_two_devices_names_them_and_breaks_its_lines(draw, monkeypatch, tmp_path):
    ax = _figure(draw, _runs(), monkeypatch, tmp_path).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["6 (H100)", "18 (H100)", "50 (CPU)"]  # the tables' column headers' marks
    assert _pieces(ax, "post_ln") == [[6, 18], [50]]  # not joined from 18 (H100) to 50 (CPU)
    assert _pieces(ax, "dlcl_pre") == [[6], [18]]
    assert _pieces(ax, "pre_ln") == [[18], [50]]
    named = [(t.get_text(), t.xy[0]) for t in ax.texts]
    assert named == [("CPU", 18)]  # dlcl_pre's 18L cell, as the tables' "· CPU"
    legend = _legend(ax)
    assert plot_devices.NOTE_BREAK in legend and plot_devices.NOTE_LABEL in legend
    assert [t for t in legend if not t.startswith("_")].count("post_ln") == 1


@pytest.mark.parametrize("draw", [dtp.plot, costs.onset_plot], ids=["metric", "onsets"])
@pytest.mark.parametrize("device", ["cpu", None], ids=["one-device", "unrecorded"])
def test_a_panel_on_one_device_has_no_marks(draw, device, monkeypatch, tmp_path):
    runs = _runs(lambda _: device)
    ax = _figure(draw, runs, monkeypatch, tmp_path).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["6", "18", "50"]
    assert _pieces(ax, "post_ln") == [[6, 18, 50]]
    assert _pieces(ax, "dlcl_pre") == [[6, 18]]
    assert len(ax.texts) == 0
    assert not {plot_devices.NOTE_BREAK, plot_devices.NOTE_LABEL} & set(_legend(ax))


def test_stretches_split_a_line_at_each_device_change():
    assert plot_devices.stretches(["H100", "H100", "CPU"]) == [(0, 2), (2, 3)]
    assert plot_devices.stretches(["CPU", None, "CPU"]) == [(0, 1), (1, 2), (2, 3)]
    assert plot_devices.stretches([None, None]) == [(0, 2)]
    assert plot_devices.stretches([]) == []

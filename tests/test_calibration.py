"""The kernel model's calibration (deepnet_jax/scale/calibration.py): the per-class factors are
measured ÷ predicted summed over the fitted profiles, the calibrated step is (1 + u) · Σ η·s,
and the committed Hopper factors are the ones their record reports."""

import json
import math
import os

import pytest

from benchmarks import kernel_calibration
from deepnet_jax.common import records
from deepnet_jax.scale import calibration, kernels

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "kernel_calibration.json")


def _profile(**classes):
    """``device_profile``'s classes: name=(measured ms, predicted ms or None)."""
    return {k: {"measured_ms": m, "predicted_ms": p} for k, (m, p) in classes.items()}


def test_the_factors_pool_the_profiles_by_class():
    a = _profile(attention=(6.0, 2.0), ffn=(3.0, 2.0), unmatched=(1.0, None))
    b = _profile(attention=(3.0, 1.0), ffn=(9.0, 4.0), copies=(2.0, 0.0))
    factors, u = calibration.fit([a, b])
    assert factors == {"attention": 9.0 / 3.0, "ffn": 12.0 / 6.0}  # copies: never predicted
    assert u == pytest.approx(1.0 / (6 + 3 + 3 + 9 + 2))


def test_the_calibrated_step_scales_each_class_and_adds_the_unmatched_share():
    cal = calibration.Calibration("hopper", {"attention": 3.0, "ffn": 2.0}, 0.25, {})
    seconds = cal.seconds({"attention": 1.0, "ffn": 2.0, "copies": 4.0})
    assert seconds == pytest.approx(1.25 * (3.0 + 4.0 + 4.0))  # copies unfitted: factor 1


def test_chips_map_to_their_family():
    assert calibration.for_chip("H200 SXM").family == "hopper"
    assert calibration.for_chip("H100 SXM").family == "hopper"
    assert calibration.for_chip("TPU v5p") is None and calibration.for_chip("B200") is None


def test_the_committed_factors_are_the_records():
    """hopper.json and docs/records/kernel_calibration.json come from one fit, and every
    check in the record is the calibration applied to that profile's classes."""
    with open(RECORD) as f:
        record = json.load(f)
    cal = calibration.for_chip("H200 SXM")
    assert cal.class_factors == record["calibration"]["class_factors"]
    assert cal.unmatched == record["calibration"]["unmatched"]
    assert cal.source["commit"] == record["commit"]
    assert set(cal.class_factors) <= set(kernels.CLASSES)
    fitted = [c for c in record["checks"] if c["role"] == "fitted"]
    assert [c["profile"] for c in fitted] == cal.source["fitted_on"]
    for c in record["checks"]:
        ratio = c["calibrated_ms"] / c["measured_step_ms"]
        assert math.isclose(c["calibrated_over_measured"], ratio)


def test_a_check_reports_both_predictions_against_the_measured_step():
    cal = calibration.Calibration("hopper", {"attention": 2.0}, 0.0, {})
    profile = {
        "profile": "x/y",
        "row": {"config": "c", "overrides": [], "step_s": 0.010},
        "predicted_ms": 4.0,
        "classes": _profile(attention=(8.0, 3.0), ffn=(2.0, 1.0), unmatched=(0.5, None)),
    }
    check = kernel_calibration.check(profile, cal, "held out")
    assert check["calibrated_ms"] == pytest.approx(2.0 * 3.0 + 1.0)
    assert check["calibrated_over_measured"] == pytest.approx(0.7)
    assert check["roofline_sum_over_measured"] == pytest.approx(0.4)


def test_the_docs_table_is_the_records():
    with open(RECORD) as f:
        record = json.load(f)
    scaling = os.path.join(ROOT, "docs", "scaling.md")
    assert records.block(scaling, "kernel-calibration").strip() == kernel_calibration.table(record)

"""The summary of a ``benchmarks/compile_vs_depth`` run and the tables of docs/benchmarks.md
generated from its record (block ``compile-vs-depth``; ``tests/test_compile_vs_depth_record.py``
regenerates it from ``docs/records/compile_vs_depth.json``).

Reads row dicts only: no jax.
"""

from __future__ import annotations

import itertools
from typing import Any

COMPILE_RATIO_TARGET = 1.5
SLOPE_LOW, SLOPE_HIGH = 100, 1000  # the scanned depths of the temp-bytes slope


def find(results: list[dict], layout: str, depth: int, policy: str) -> dict | None:
    for r in results:
        if (r["layout"], r["depth"], r["remat_policy"]) == (layout, depth, policy):
            return r
    return None


def compile_ratio(results: list[dict]) -> dict[str, Any]:
    """compile_s (and compile_cpu_s, and lower_s + compile_s) of scanned depth 1000 over
    scanned depth 6."""
    deep, shallow = find(results, "scan", 1000, "full"), find(results, "scan", 6, "full")
    if deep is None or shallow is None:
        return {"compile_ratio_scan1000_over_scan6": None}
    ratio = deep["compile_s"] / shallow["compile_s"]
    total = (deep["lower_s"] + deep["compile_s"]) / (shallow["lower_s"] + shallow["compile_s"])
    cpu = None
    if deep.get("compile_cpu_s") and shallow.get("compile_cpu_s"):
        cpu = deep["compile_cpu_s"] / shallow["compile_cpu_s"]
    return {
        "compile_ratio_scan1000_over_scan6": ratio,
        "compile_cpu_ratio_scan1000_over_scan6": cpu,
        "lower_plus_compile_ratio_scan1000_over_scan6": total,
        "compile_ratio_target": COMPILE_RATIO_TARGET,
        "compile_ratio_meets_target": ratio <= COMPILE_RATIO_TARGET,
    }


def temp_slope(results: list[dict], grad_bytes: int, activation_bytes: int) -> dict[str, Any]:
    """Temp bytes per extra layer (scan, full, depth 100 → 1000) against the per-layer limit:
    one layer's float32 gradient (``grad_bytes``) + 2·B·T·d_model·4 (``activation_bytes``)."""
    deep = find(results, "scan", SLOPE_HIGH, "full")
    shallow = find(results, "scan", SLOPE_LOW, "full")
    if deep is None or shallow is None:
        return {"temp_slope_bytes_per_layer": None}
    slope = (deep["temp_bytes"] - shallow["temp_bytes"]) / (SLOPE_HIGH - SLOPE_LOW)
    limit = grad_bytes + activation_bytes
    return {
        "temp_slope_bytes_per_layer": slope,
        "temp_slope_limit_bytes_per_layer": limit,
        "limit_layer_grad_bytes": grad_bytes,
        "limit_activation_bytes": activation_bytes,
        "temp_slope_within_limit": slope <= limit,
    }


def unrolled_growth(results: list[dict]) -> dict[str, Any]:
    """From each unrolled depth (policy "full") to the next: the ratios of compile time, HLO
    size, temp bytes and step time; and unrolled ÷ scanned at the depths both have."""
    unrolled = sorted(
        (r for r in results if r["layout"] == "unroll" and r["remat_policy"] == "full"),
        key=lambda r: r["depth"],
    )
    keys = ("compile_s", "compile_cpu_s", "hlo_chars", "temp_bytes", "step_s_median")
    growth = {
        f"{lo['depth']}->{hi['depth']}": {k: hi[k] / lo[k] for k in keys if k in lo}
        for lo, hi in itertools.pairwise(unrolled)
    }
    over_scan = {
        str(u["depth"]): {k: u[k] / s[k] for k in keys if k in u}
        for u in unrolled
        if (s := find(results, "scan", u["depth"], "full")) is not None
    }
    return {"unrolled_growth": growth or None, "unrolled_over_scanned": over_scan or None}


def grouped_vs_flat(results: list[dict]) -> dict[str, Any]:
    """For the depths both layouts have (policy "full"): temp-bytes growth from each depth to
    the next, per layout, and grouped ÷ flat temp bytes, step time and compile time per depth."""
    pairs = {}
    for r in results:
        if r["layout"] == "group" and r["remat_policy"] == "full":
            flat = find(results, "scan", r["depth"], "full")
            if flat is not None:
                pairs[r["depth"]] = (flat, r)
    if len(pairs) < 2:
        return {"temp_growth": None}
    depths = sorted(pairs)
    growth = {
        f"{lo}->{hi}": {
            layout: pairs[hi][i]["temp_bytes"] / pairs[lo][i]["temp_bytes"]
            for i, layout in enumerate(("flat", "grouped"))
        }
        for lo, hi in itertools.pairwise(depths)
    }
    ratios = {
        str(d): {
            "temp_bytes": g["temp_bytes"] / f["temp_bytes"],
            "step_s": g["step_s_median"] / f["step_s_median"],
            "compile_s": g["compile_s"] / f["compile_s"],
        }
        for d, (f, g) in sorted(pairs.items())
    }
    return {"temp_growth": growth, "grouped_over_flat": ratios}


def summary(results: list[dict], grad_bytes: int, activation_bytes: int) -> dict[str, Any]:
    return {
        "summary": True,
        **compile_ratio(results),
        **temp_slope(results, grad_bytes, activation_bytes),
        **unrolled_growth(results),
        **grouped_vs_flat(results),
    }


def _mib(n: int) -> str:
    return f"{n:,} ({n / 2**20:.1f} MiB)"


def results_table(rows: list[dict]) -> str:
    lines = [
        "| layout | depth | remat policy | params | lower (s) | compile (s) "
        "| compile, CPU (s) | HLO chars | temp bytes | step median (s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['depth']} | {r['remat_policy']} | {r['params']:,} "
            f"| {r['lower_s']:.2f} | {r['compile_s']:.1f} | {r['compile_cpu_s']:.1f} "
            f"| {r['hlo_chars']:,} "
            f"| {_mib(r['temp_bytes'])} | {r['step_s_median']:.4f} |"
        )
    return "\n".join(lines)


def summary_table(record: dict) -> str:
    s, rows = record["summary"], record["rows"]
    lines = ["| quantity | measured | target / limit | verdict |", "|---|---:|---:|---|"]
    if s["compile_ratio_scan1000_over_scan6"] is not None:
        deep, shallow = find(rows, "scan", 1000, "full"), find(rows, "scan", 6, "full")
        verdict = "met" if s["compile_ratio_meets_target"] else "not met"
        lines += [
            f"| compile-time ratio, scan 1000 / scan 6 "
            f"| **{s['compile_ratio_scan1000_over_scan6']:.2f}** "
            f"({deep['compile_s']:.2f} s / {shallow['compile_s']:.2f} s) "
            f"| ≤ {s['compile_ratio_target']} | {verdict} |",
            f"| compile CPU-time ratio, scan 1000 / scan 6 "
            f"| {s['compile_cpu_ratio_scan1000_over_scan6']:.2f} "
            f"({deep['compile_cpu_s']:.2f} s / {shallow['compile_cpu_s']:.2f} s) | — | — |",
            f"| (lower + compile) ratio, scan 1000 / scan 6 "
            f"| {s['lower_plus_compile_ratio_scan1000_over_scan6']:.2f} | — | — |",
        ]
    if s["temp_slope_bytes_per_layer"] is not None:
        slope, limit = s["temp_slope_bytes_per_layer"], s["temp_slope_limit_bytes_per_layer"]
        verdict = (
            f"met: {slope / limit:.0%} of the limit, {limit - slope:,.0f} B/layer of headroom"
            if s["temp_slope_within_limit"]
            else f"not met: {slope / limit:.0%} of the limit"
        )
        lines.append(
            f"| temp-bytes slope per layer, scan `full`, depth {SLOPE_LOW} → {SLOPE_HIGH} "
            f"| **{slope:,.0f} B/layer** | ≤ {limit:,} B/layer | {verdict} |"
        )
    for step, g in (s.get("unrolled_growth") or {}).items():
        lo, hi = step.split("->")
        lines.append(
            f"| unrolled {lo} → {hi} layers: compile time, compile CPU time, HLO chars, "
            f"temp bytes, step time | ×{g['compile_s']:.1f}, ×{g['compile_cpu_s']:.1f}, "
            f"×{g['hlo_chars']:.2f}, ×{g['temp_bytes']:.2f}, ×{g['step_s_median']:.1f} | — | — |"
        )
    for depth, g in (s.get("unrolled_over_scanned") or {}).items():
        lines.append(
            f"| unrolled ÷ scanned at {depth} layers: compile time, compile CPU time, HLO chars, "
            f"temp bytes, step time | {g['compile_s']:.1f}, {g['compile_cpu_s']:.1f}, "
            f"{g['hlo_chars']:.2f}, {g['temp_bytes']:.2f}, {g['step_s_median']:.2f} | — | — |"
        )
    return "\n".join(lines)


def table(record: dict) -> str:
    """The ``compile-vs-depth`` block of docs/benchmarks.md: the rows, then the summary."""
    return results_table(record["rows"]) + "\n\n" + summary_table(record)


def grouped_table(record: dict) -> str:
    """The ``grouped-vs-flat`` block of docs/scaling.md: per depth both layouts have (policy
    ``full``), the group size k, both temp bytes and grouped ÷ flat; then the temp-bytes growth
    from each depth to the next. Temp bytes only: deterministic for a commit and a jax version."""
    rows = record["rows"]
    lines = [
        "| depth | k | temp bytes flat | temp bytes grouped | grouped ÷ flat |",
        "|---:|---:|---:|---:|---:|",
    ]
    for depth in sorted({r["depth"] for r in rows if r["layout"] == "group"}):
        flat, grouped = find(rows, "scan", depth, "full"), find(rows, "group", depth, "full")
        if flat is None or grouped is None:
            continue
        lines.append(
            f"| {depth} | {grouped['group_size']} | {_mib(flat['temp_bytes'])} "
            f"| {_mib(grouped['temp_bytes'])} "
            f"| {grouped['temp_bytes'] / flat['temp_bytes']:.2f} |"
        )
    growth = record["summary"].get("temp_growth") or {}
    if growth:
        lines += ["", "| depths | temp bytes flat, growth | temp bytes grouped, growth |"]
        lines.append("|---|---:|---:|")
        for step, g in growth.items():
            lo, hi = step.split("->")
            lines.append(f"| {lo} → {hi} | ×{g['flat']:.2f} | ×{g['grouped']:.2f} |")
    return "\n".join(lines)


BLOCKS = {"compile-vs-depth": table, "grouped-vs-flat": grouped_table}

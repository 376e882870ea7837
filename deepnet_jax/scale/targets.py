"""Compile targets for the planner: Cloud TPU slices, NVIDIA GPU nodes and simulated CPU devices,
each with the chip's figures that a plan is judged by (memory per chip, peak bf16 FLOP/s, memory
and interconnect bandwidth).

A target name is one of

* a Cloud TPU accelerator type: ``v4-N`` and ``v5p-N`` (N TensorCores, two per chip: ``v5p-8``
  is 4 chips), ``v5e-N`` / ``v5litepod-N`` and ``v6e-N`` (N chips), for the slice sizes in
  ``TPU_SLICES`` (the shapes Cloud TPU creates for them);
* a raw TPU topology, ``<generation>:<shape>`` as libtpu spells it (``v5p:4x4x4``, ``v5e:2x4``);
* a GPU node or cluster, ``<gpu>-N`` (``h100-8``, ``a100-8``, ``h200-8``, ``b200-8``,
  ``h100-64``): N GPUs, 8 per host (the CUDA plugin's topology ``1x<hosts>x<per host>``);
* ``cpu:N``: N simulated CPU devices (XLA:CPU, as the planner always did).

TPU and GPU targets compile deviceless: :func:`compile_devices` returns compile-only devices of
the target from libtpu (``pip install -e ".[tpu]"``) or jax's CUDA plugin with XLA's published
device description of the GPU (``pip install -e ".[gpu-plan]"``; the descriptions ship in
``deepnet_jax/scale/gpu_specs/``), so a multi-host slice is compiled from one CPU host.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import importlib.util
import math
import os
import re

import jax

GIB = 2**30
GB = 1e9


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator chip's figures (per chip; for GPUs per GPU; one JAX device each).

    ``memory_bytes``: HBM; ``peak_flops``: dense bf16 FLOP/s; ``memory_bytes_per_s``: HBM
    bandwidth; ``link_bytes_per_s``: the chip's interconnect bandwidth out of the chip, all links
    together, one direction (TPU ICI, NVIDIA NVLink within a host); ``chips_per_host``: chips of
    one host (one JAX process) in multi-host slices and clusters.
    """

    name: str
    platform: str  # "tpu", "cuda" or "cpu"
    memory_bytes: int
    peak_flops: float
    memory_bytes_per_s: float
    link_bytes_per_s: float
    chips_per_host: int
    spec_file: str = ""  # GPUs: XLA's device description in deepnet_jax/scale/gpu_specs/


# TPU figures per chip, from the Cloud TPU system-architecture pages (cloud.google.com/tpu/docs/
# v4, /v5e, /v5p, /v6e, "system specifications"): peak bf16 compute, HBM capacity (GiB; what the
# TPU compiler itself allows a program differs: 30.75, 15.75, 95.74 and 31.25 GiB) and bandwidth,
# and the
# per-chip bidirectional ICI bandwidth (v5e 400 GB/s, v5p 1,200 GB/s, v6e 800 GB/s), halved here
# for one direction. The v4 page gives no ICI figure: 6 links × 45 GB/s one way, from "How to
# Scale Your Model" (jax-ml.github.io/scaling-book/tpus, "TPU specs"). Hosts carry 4 chips
# (v4/v5p; multi-host v5e/v6e slices run 4-chip VMs); v4 and v5p chips are megacore devices.
TPU_CHIPS = {
    "v4": Chip("TPU v4", "tpu", 32 * GIB, 275e12, 1200 * GB, 6 * 45 * GB, 4),
    "v5e": Chip("TPU v5e", "tpu", 16 * GIB, 197e12, 819 * GB, 400 * GB / 2, 4),
    "v5p": Chip("TPU v5p", "tpu", 95 * GIB, 459e12, 2765 * GB, 1200 * GB / 2, 4),
    "v6e": Chip("TPU v6e", "tpu", 32 * GIB, 918e12, 1640 * GB, 800 * GB / 2, 4),
}
# GPU memory size and bandwidth: XLA's device descriptions (gpu_specs/, each file names its
# openxla/xla source and commit; device_memory_size, memory_bandwidth). Dense bf16 peaks: NVIDIA's
# datasheets give tensor-core peaks with 2:4 sparsity, the dense figure is half (A100 312, H100 and
# H200 SXM 989, HGX B200 2,250 TFLOP/s). NVLink: the datasheets' bidirectional totals per GPU
# (A100 600, H100/H200 900, B200 1,800 GB/s), halved for one direction. 8 GPUs per host (HGX).
GPU_CHIPS = {
    "a100": Chip(
        "A100 80GB SXM", "cuda", 85100068864, 312e12, 2039.04 * GB, 300 * GB, 8, "a100_sxm_80.txtpb"
    ),
    "h100": Chip(
        "H100 SXM", "cuda", 84942979072, 989e12, 3352.32 * GB, 450 * GB, 8, "h100_sxm.txtpb"
    ),
    "h200": Chip("H200 SXM", "cuda", 151397597184, 989e12, 4800 * GB, 450 * GB, 8, "h200.txtpb"),
    "b200": Chip("B200", "cuda", 191514411008, 2250e12, 7672.32 * GB, 900 * GB, 8, "b200.txtpb"),
}
# Cloud TPU slice shapes by chip count: 3D tori for v4/v5p, 2D for v5e/v6e
_SHAPES_3D = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    256: "4x8x8",
    512: "8x8x8",
    1024: "8x8x16",
    2048: "8x16x16",
    4096: "16x16x16",
}
_SHAPES_2D = {
    1: "1x1",
    4: "2x2",
    8: "2x4",
    16: "4x4",
    32: "4x8",
    64: "8x8",
    128: "8x16",
    256: "16x16",
}
TPU_SLICES = {
    "v4": (2, _SHAPES_3D),  # (TensorCores per chip in the accelerator name, shapes)
    "v5p": (2, _SHAPES_3D),
    "v5e": (1, _SHAPES_2D),
    "v6e": (1, _SHAPES_2D),
}
CPU_CHIP = Chip("CPU (simulated device)", "cpu", 0, 0.0, 0.0, 0.0, 0)


@dataclasses.dataclass(frozen=True)
class Target:
    """A named compile target: ``num_devices`` JAX devices of ``chip`` over ``num_hosts``."""

    name: str
    chip: Chip
    topology: str  # libtpu's "v5p:2x2x1", the CUDA plugin's "1x1x8", or "cpu:N"
    num_devices: int
    num_hosts: int
    host_bounds: tuple[int, int, int] | None = None  # TPU chips per host, when not libtpu's 2x2x1
    megacore: bool = False  # v4/v5p: each chip's two TensorCores as one device

    @property
    def platform(self) -> str:
        return self.chip.platform


def _known() -> str:
    tpu = ", ".join(
        f"{g}-{{{','.join(str(c * per) for c in shapes)}}}"
        for g, (per, shapes) in TPU_SLICES.items()
    )
    return (
        f"TPU slices {tpu} (v5litepod-N = v5e-N), raw TPU topologies such as v5p:4x4x4, "
        f"GPUs {', '.join(f'{g}-N' for g in GPU_CHIPS)} (N a multiple of 8, or 1, 2, 4), cpu:N"
    )


def parse(name: str) -> Target:
    """The target called ``name`` (module docstring); one-line ``ValueError`` naming the known
    targets otherwise."""
    text = name.strip().lower().replace("v5litepod-", "v5e-")
    raw = re.fullmatch(r"(v4|v5e|v5p|v6e):(\d+(?:x\d+){1,2})", text)
    if raw:
        generation, shape = raw.groups()
        chips = math.prod(int(d) for d in shape.split("x"))
        return _tpu(name, generation, shape, chips)
    sized = re.fullmatch(r"([a-z0-9]+)[-:](\d+)", text)
    if sized and sized.group(1) == "cpu" and int(sized.group(2)) >= 1:
        n = int(sized.group(2))
        return Target(name, CPU_CHIP, f"cpu:{n}", n, 1)
    if sized and sized.group(1) in TPU_SLICES:
        generation, count = sized.group(1), int(sized.group(2))
        per_chip, shapes = TPU_SLICES[generation]
        if count % per_chip == 0 and count // per_chip in shapes:
            chips = count // per_chip
            return _tpu(name, generation, shapes[chips], chips)
    if sized and sized.group(1) in GPU_CHIPS:
        gpus = int(sized.group(2))
        if gpus in (1, 2, 4) or (gpus % 8 == 0 and gpus > 0):
            chip = GPU_CHIPS[sized.group(1)]
            hosts, per_host = (gpus // 8, 8) if gpus >= 8 else (1, gpus)
            return Target(name, chip, f"1x{hosts}x{per_host}", gpus, hosts)
    raise ValueError(f"--target={name!r} is not a known target: {_known()}")


def _tpu(name: str, generation: str, shape: str, chips: int) -> Target:
    chip = TPU_CHIPS[generation]
    hosts, bounds = max(1, chips // chip.chips_per_host), None
    if generation in ("v5e", "v6e") and chips <= 8 and chips != 4:
        # single-host slices: 1 chip (ct5lp-hightpu-1t), 8 chips (ct5lp-hightpu-8t,
        # ct6e-standard-8t) and raw shapes of up to 8 chips on one host
        dims = [int(d) for d in shape.split("x")]
        hosts, bounds = 1, (dims[0], dims[1], 1)
    megacore = generation in ("v4", "v5p")
    return Target(name, chip, f"{generation}:{shape}", chips, hosts, bounds, megacore)


def _tpu_options(target: Target) -> dict:
    """libtpu's topology options: megacore chips (v4 would show each TensorCore otherwise; v5p
    is megacore either way) and the chips per host of single-host v5e/v6e slices."""
    options: dict = {"chip_config_name": "megacore"} if target.megacore else {}
    if target.host_bounds:
        options["chips_per_host_bounds"] = target.host_bounds
    return options


# jax's GPU client preallocates this share of each GPU's memory by default; a run can use no more
GPU_MEMORY_FRACTION = 0.75


def usable_bytes(target: Target) -> int:
    """Memory one device of the target gives a run: the chip's HBM on TPUs (the compiler refuses
    a program above what it allows), ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of it on GPUs (0.75 by
    default; jax preallocates that much and no more), 0 for simulated CPU devices (unknown)."""
    if target.platform != "cuda":
        return target.chip.memory_bytes
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", GPU_MEMORY_FRACTION))
    return int(target.chip.memory_bytes * fraction)


def gpu_spec(chip: Chip) -> str:
    """The text of XLA's GPU device description for ``chip`` (``gpu_specs/<file>``)."""
    files = importlib.resources.files("deepnet_jax.scale") / "gpu_specs"
    return (files / chip.spec_file).read_text()


def compile_devices(target: Target) -> list[jax.Device]:
    """Compile-only devices of a TPU or GPU target (no hardware needed), in topology order.

    Raises ``ValueError`` (one line) when the extra that compiles for it is not installed."""
    from deepnet_jax.common import jax_compat, native_stderr

    if not native_stderr.has_accelerator():  # no TPU here to guard: let planners run side by side
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with native_stderr.filtered():
            if target.platform == "tpu":
                return jax_compat.compile_only_devices(
                    target.topology, "tpu", **_tpu_options(target)
                )
            return jax_compat.compile_only_devices(
                target.chip.name,
                "cuda",
                target_config=gpu_spec(target.chip),
                topology=target.topology,
            )
    except (RuntimeError, NotImplementedError, ValueError) as e:
        reason = " ".join(str(e).split())[:300]
        extra, module = (
            ("tpu", "libtpu")
            if target.platform == "tpu"
            else ("gpu-plan", "jax_plugins.xla_cuda12")
        )
        if importlib.util.find_spec(module) is None:
            reason += f'; install the {extra} extra: pip install -e ".[{extra}]"'
        raise ValueError(
            f"--target={target.name}: cannot compile for {target.chip.name}: {reason}"
        ) from e


# the device kinds JAX reports for each chip (``jax.Device.device_kind``), checked in order
_DEVICE_KINDS = (
    ("H100", "h100"),
    ("H200", "h200"),
    ("A100", "a100"),
    ("B200", "b200"),
    ("TPU v6 lite", "v6e"),
    ("TPU v5 lite", "v5e"),
    ("TPU v5", "v5p"),
    ("TPU v4", "v4"),
)


def of_devices(devices: list[jax.Device]) -> Target | None:
    """The target the run's own accelerators are (their chip's figures judge its plans), from
    their device kind; None on CPU devices or an accelerator this module has no figures for."""
    if not devices or devices[0].platform == "cpu":
        return None
    kind = devices[0].device_kind
    key = next((key for text, key in _DEVICE_KINDS if text in kind), None)
    if key is None:
        return None
    chip = GPU_CHIPS.get(key) or TPU_CHIPS[key]
    hosts = len({d.process_index for d in devices})
    return Target(f"{kind} × {len(devices)}", chip, "", len(devices), hosts)

"""XLA:TPU's asynchronous copies between HBM and on-chip memory in the kernel model
(deepnet_jax.scale.async_copies): a prefetch's HBM read goes to the first kernel reading the
array, an eviction's HBM write to the kernel that produced it, and a copy that serves no kernel
in its computation stays a copy kernel. Hand-counted on small modules written as XLA:TPU prints
them (``copy-start``: ``(destination, source, context)``)."""

from __future__ import annotations

import pytest

from deepnet_jax.scale import async_copies, hbm_bytes, hlo_module, kernels, targets

# a made-up chip with round figures: 1 TFLOP/s, 100 GB/s
TPU = targets.Chip("test tpu", "tpu", 2**30, 1e12, 1e11, 1e10, 1)
GPU = targets.Chip("test gpu", "cuda", 2**30, 1e12, 1e11, 1e10, 1)

_MM = """%mm (p0: f32[8,128], p1: f32[128,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0:T(8,128)} parameter(0)
  %p1 = f32[128,128]{1,0:T(8,128)S(1)} parameter(1)
  ROOT %d = f32[8,128]{1,0:T(8,128)} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%neg (q0: f32[8,128]) -> f32[8,128] {
  %q0 = f32[8,128]{1,0:T(8,128)} parameter(0)
  ROOT %n = f32[8,128]{1,0:T(8,128)S(1)} negate(%q0)
}
"""  # noqa: E501

# w prefetched, read through a bitcast by the matmul f; then f's result negated on chip (g)
# and evicted to HBM (e)
_MODULE = f"""HloModule m, is_scheduled=true

{_MM}
ENTRY %main (a: f32[8,128], w: f32[128,128]) -> f32[8,128] {{
  %a = f32[8,128]{{1,0:T(8,128)}} parameter(0)
  %w = f32[128,128]{{1,0:T(8,128)}} parameter(1)
  %cs = (f32[128,128]{{1,0:T(8,128)S(1)}}, f32[128,128]{{1,0:T(8,128)}}, u32[]{{:S(2)}}) copy-start(%w)
  %cd = f32[128,128]{{1,0:T(8,128)S(1)}} copy-done(%cs)
  %v = f32[128,128]{{1,0:T(8,128)S(1)}} bitcast(%cd)
  %f = f32[8,128]{{1,0:T(8,128)}} fusion(%a, %v), kind=kOutput, calls=%mm
  %g = f32[8,128]{{1,0:T(8,128)S(1)}} fusion(%f), kind=kLoop, calls=%neg
  %es = (f32[8,128]{{1,0:T(8,128)}}, f32[8,128]{{1,0:T(8,128)S(1)}}, u32[]{{:S(2)}}) copy-start(%g)
  ROOT %ed = f32[8,128]{{1,0:T(8,128)}} copy-done(%es)
}}
"""  # noqa: E501

# w prefetched into on-chip memory and handed to a loop in a tuple: it serves no kernel here
_TO_A_LOOP = """HloModule m, is_scheduled=true

ENTRY %main (w: f32[128,128]) -> (f32[128,128]) {
  %w = f32[128,128]{1,0:T(8,128)} parameter(0)
  %cs = (f32[128,128]{1,0:T(8,128)S(1)}, f32[128,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%w)
  %cd = f32[128,128]{1,0:T(8,128)S(1)} copy-done(%cs)
  ROOT %t = (f32[128,128]{1,0:T(8,128)S(1)}) tuple(%cd)
}
"""

A = 8 * 128 * 4  # f32[8,128] in one (8,128) tile
W = 128 * 128 * 4


def test_a_prefetch_goes_to_its_reader_and_an_eviction_to_its_producer():
    module = hlo_module.parse(_MODULE)
    assert async_copies.owners(module.computations[module.entry]) == {"cs": "f", "es": "g"}
    found = {k.name: k for k in kernels.kernels(module, TPU)}
    assert set(found) == {"f", "g"}  # the copies are no kernels of their own
    # f reads a from HBM and w (its prefetch's read), writes its result; g reads f's result
    # from HBM, and writes its own on chip: the eviction's HBM write
    assert found["f"].bytes == A + W + A
    assert found["g"].bytes == A + A
    flops = 2 * 8 * 128 * 128
    assert found["f"].flops == flops
    assert found["f"].seconds == pytest.approx(max(flops / 1e12, (2 * A + W) / 1e11))


def test_a_copy_that_serves_no_kernel_stays_a_copy():
    module = hlo_module.parse(_TO_A_LOOP)
    assert async_copies.owners(module.computations[module.entry]) == {}
    (k,) = kernels.kernels(module, TPU)
    assert (k.name, k.kind, k.bytes) == ("cs", "copies", W)  # reads w from HBM


def test_copy_start_reads_its_source_and_writes_its_destination():
    """Each where it lives: a prefetch reads HBM, an eviction writes HBM (the tuple's first
    element is the destination: what copy-done gives)."""
    module = hlo_module.parse(_MODULE)
    body = {i.name: i for i in module.computations[module.entry]}
    assert hbm_bytes.kernel_bytes(module, body["cs"], tpu=True) == W
    assert hbm_bytes.kernel_bytes(module, body["es"], tpu=True) == A
    assert hbm_bytes.kernel_bytes(module, body["cs"]) == 2 * W  # elsewhere both count


def test_off_a_tpu_the_copies_are_kernels():
    """Memory spaces are XLA:TPU's: on another platform every copy is a kernel."""
    module = hlo_module.parse(_MODULE)
    names = {k.name for k in kernels.kernels(module, GPU)}
    assert {"cs", "es", "f", "g"} <= names

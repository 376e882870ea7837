"""The HBM bytes of one kernel (deepnet_jax.scale.hbm_bytes), hand-counted on small HLO modules
written as XLA prints them: a per-layer slice of a stacked weight inside a nested fusion (as
XLA:TPU nests a convolution's operand fusions), a slice's index, and XLA:TPU's tiles and memory
spaces (a prefetch into on-chip memory with copy-start)."""

from __future__ import annotations

from deepnet_jax.scale import hbm_bytes, hlo_module, kernels, targets

# a made-up chip with round figures, so that each time is a hand count
TPU = targets.Chip("test tpu", "tpu", 2**30, 1e12, 1e11, 1e10, 1)

_NESTED = """HloModule m, is_scheduled=true

%slice_layer (p0: bf16[10,64,256], p1: s32[]) -> bf16[64,256] {
  %p0 = bf16[10,64,256]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = bf16[1,64,256]{2,1,0} dynamic-slice(%p0, %p1, %z, %z), dynamic_slice_sizes={1,64,256}
  ROOT %b = bf16[64,256]{1,0} bitcast(%ds)
}

%matmul (q0: bf16[32,64], q1: bf16[10,64,256], q2: s32[]) -> bf16[32,256] {
  %q0 = bf16[32,64]{1,0} parameter(0)
  %q1 = bf16[10,64,256]{2,1,0} parameter(1)
  %q2 = s32[] parameter(2)
  %w = bf16[64,256]{1,0} fusion(%q1, %q2), kind=kLoop, calls=%slice_layer
  ROOT %c = bf16[32,256]{1,0} convolution(%q0, %w), dim_labels=bf_io->bf
}

ENTRY %main (x: bf16[32,64], a: bf16[10,64,256], i: s32[]) -> bf16[32,256] {
  %x = bf16[32,64]{1,0} parameter(0)
  %a = bf16[10,64,256]{2,1,0} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = bf16[32,256]{1,0} fusion(%x, %a, %i), kind=kOutput, calls=%matmul
}
"""


def _kernel(text: str, name: str) -> tuple[hlo_module.Module, hlo_module.Instruction]:
    module = hlo_module.parse(text)
    return module, next(i for i in module.computations[module.entry] if i.name == name)


def test_a_nested_fusions_slice_of_a_stacked_weight_reads_one_layer():
    """A scanned layer's matmul on XLA:TPU: the convolution's fusion nests the fusion that
    slices layer i of the stacked [10, 64, 256] weight. It reads x, that one layer and the
    index, and writes its result; not the whole stack, and not the nested fusion's parameters
    a second time."""
    module, ins = _kernel(_NESTED, "f")
    x, layer, index, out = 32 * 64 * 2, 64 * 256 * 2, 4, 32 * 256 * 2
    assert hbm_bytes.kernel_bytes(module, ins) == x + layer + index + out
    (k,) = kernels.kernels(module, TPU)
    assert k.flops == 2 * 32 * 256 * 64 and k.bytes == x + layer + index + out


_SLICED = """HloModule m, is_scheduled=true

%slice_dot (p0: f32[10,64,128], p1: s32[], p2: f32[16,64]) -> f32[16,128] {
  %p0 = f32[10,64,128]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = f32[1,64,128]{2,1,0} dynamic-slice(%p0, %p1, %z, %z), dynamic_slice_sizes={1,64,128}
  %w = f32[64,128]{1,0} bitcast(%ds)
  %p2 = f32[16,64]{1,0} parameter(2)
  ROOT %d = f32[16,128]{1,0} dot(%p2, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: f32[10,64,128], i: s32[], x: f32[16,64]) -> f32[16,128] {
  %a = f32[10,64,128]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %x = f32[16,64]{1,0} parameter(2)
  ROOT %f = f32[16,128]{1,0} fusion(%a, %i, %x), kind=kOutput, calls=%slice_dot
}
"""


def test_a_slices_index_is_read_as_itself_not_as_the_slice():
    """The index a dynamic-slice reads is its 4 bytes; only the sliced operand counts the
    slice (an unnested fusion, as XLA:GPU fuses a scanned weight's slice into its gemm)."""
    module, ins = _kernel(_SLICED, "f")
    layer, index, x, out = 64 * 128 * 4, 4, 16 * 64 * 4, 16 * 128 * 4
    assert hbm_bytes.kernel_bytes(module, ins) == layer + index + x + out


_PREFETCHED = """HloModule m, is_scheduled=true

%mm (p0: f32[8,64], p1: f32[64,128]) -> f32[8,128] {
  %p0 = f32[8,64]{1,0:T(8,128)} parameter(0)
  %p1 = f32[64,128]{1,0:T(8,128)S(1)} parameter(1)
  ROOT %d = f32[8,128]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: f32[8,64], w: f32[64,128]) -> f32[8,128] {
  %a = f32[8,64]{1,0:T(8,128)} parameter(0)
  %w = f32[64,128]{1,0:T(8,128)} parameter(1)
  %cs = (f32[64,128]{1,0:T(8,128)S(1)}, f32[64,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%w)
  %cd = f32[64,128]{1,0:T(8,128)S(1)} copy-done(%cs)
  ROOT %f = f32[8,128]{1,0:T(8,128)} fusion(%a, %cd), kind=kOutput, calls=%mm
}
"""


def test_a_tpu_kernel_counts_tiles_and_only_hbm():
    """XLA:TPU prefetches w into on-chip memory (S(1)) with copy-start: the copy reads w from
    HBM once, the matmul reads it from on-chip memory (no HBM bytes); a's 64 columns take a
    128-column tile in HBM. Elsewhere (tpu=False) every array counts, unpadded; the copy
    reads its source and writes its destination, the first of its (destination, source,
    context) tuple (what copy-done gives). The kernel model gives the copy's read to the matmul
    (tests/test_async_copies.py)."""
    module, copy = _kernel(_PREFETCHED, "cs")
    _, fusion = _kernel(_PREFETCHED, "f")
    w, a_tiled, a, out = 64 * 128 * 4, 8 * 128 * 4, 8 * 64 * 4, 8 * 128 * 4
    assert hbm_bytes.kernel_bytes(module, copy, tpu=True) == w
    assert hbm_bytes.kernel_bytes(module, fusion, tpu=True) == a_tiled + out
    assert hbm_bytes.kernel_bytes(module, copy) == 2 * w
    assert hbm_bytes.kernel_bytes(module, fusion) == a + w + out


_SLICED_ON_CHIP = """HloModule m, is_scheduled=true

ENTRY %main (a: f32[6,8,128]) -> f32[2,8,128] {
  %a = f32[6,8,128]{2,1,0:T(8,128)} parameter(0)
  %ss = ((f32[6,8,128]{2,1,0:T(8,128)}), f32[2,8,128]{2,1,0:T(8,128)S(1)}, s32[]{:S(2)}) slice-start(%a), slice={[0:2], [0:8], [0:128]}
  ROOT %sd = f32[2,8,128]{2,1,0:T(8,128)S(1)} slice-done(%ss)
}
"""  # noqa: E501


def test_an_async_slice_into_on_chip_memory_reads_its_slice():
    """XLA:TPU slices a weight into on-chip memory with slice-start (the default config on a
    v5e): the slice is read from HBM and written on chip; elsewhere read and written. A copy."""
    module, ins = _kernel(_SLICED_ON_CHIP, "ss")
    piece = 2 * 8 * 128 * 4
    assert hbm_bytes.kernel_bytes(module, ins, tpu=True) == piece
    assert hbm_bytes.kernel_bytes(module, ins) == 2 * piece
    (k,) = kernels.kernels(module, TPU)
    assert k.bytes == piece and k.kind == "copies"


def test_hbm_nbytes_of_a_tuple_skips_on_chip_arrays():
    text = "(f32[3,5]{1,0:T(8,128)}, bf16[16]{0:T(1024)S(1)}, s32[]{:T(128)S(6)}, f32[2]{0})"
    assert hbm_bytes.hbm_nbytes(text) == 3 * 5 * 4 + 16 * 2 + 4 + 2 * 4
    assert hbm_bytes.hbm_nbytes(text, tpu=True) == 8 * 128 * 4 + 2 * 4

"""hlo_census against XLA's own counts: loop-free matmuls equal XLA's cost analysis, scanned ones
count every trip (XLA counts the body once), and collectives are found and sized; and the HLO
reader under it (hlo_module): result types sized, entry parameters listed, trip counts found."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from deepnet_jax.scale import hlo_census, hlo_module, kernels, targets


def _matmuls(w, x):
    return jnp.tanh(x @ w[0]) @ w[1]


def _scanned(w, x):
    def body(c, wi):
        return jnp.tanh(c @ wi), None

    return jax.lax.scan(body, x, w)[0]


def test_loop_free_matmul_flops_equal_xla_cost_analysis():
    w, x = jnp.ones((2, 64, 64)), jnp.ones((16, 64))
    lowered = jax.jit(_matmuls).lower(w, x)
    census = hlo_census.matmul_flops(lowered.as_text(dialect="hlo"))
    assert census == 2 * (2 * 16 * 64 * 64)  # two [16,64]x[64,64] matmuls
    assert lowered.compile().cost_analysis()["flops"] == census  # tanh: a transcendental


@pytest.mark.parametrize("layers", [3, 7])
def test_scan_bodies_count_once_per_trip(layers):
    w, x = jnp.ones((layers, 32, 32)), jnp.ones((8, 32))
    text = jax.jit(_scanned).lower(w, x).as_text(dialect="hlo")
    assert hlo_census.matmul_flops(text) == layers * 2 * 8 * 32 * 32
    module = hlo_module.parse(text)
    assert layers in hlo_module.execution_counts(module).values()


def test_gradient_of_a_scan_counts_forward_and_backward_trips():
    layers, w, x = 5, jnp.ones((5, 32, 32)), jnp.ones((8, 32))
    grad = jax.jit(jax.grad(lambda w, x: _scanned(w, x).sum()))
    flops = hlo_census.matmul_flops(grad.lower(w, x).as_text(dialect="hlo"))
    assert flops == 3 * layers * 2 * 8 * 32 * 32  # forward, input grad, weight grad


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu not installed")
def test_collectives_of_a_sharded_sum_on_compile_only_tpus():
    devices = targets.compile_devices(targets.parse("v5e-4"))
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    x = jax.ShapeDtypeStruct(
        (16, 256), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("x"))
    )
    out = NamedSharding(mesh, PartitionSpec())
    text = jax.jit(lambda a: a.sum(0), out_shardings=out).lower(x).compile().as_text()
    moved = hlo_census.collectives(text, 4)
    assert moved["all-reduce"].count == 1 and moved["all-gather"].count == 0
    assert moved["all-reduce"].bytes == 2 * 256 * 4 * 3 // 4  # ring: 2(n-1)/n of 1 KiB
    assert hlo_module.unknown_loops(text) == 0


def test_group_sizes_in_each_replica_group_syntax():
    def ins(rest):
        return hlo_module.Instruction("a", "f32[8]", "all-reduce", rest)

    assert hlo_census.group_size(ins("x), replica_groups={{0,1,2,3},{4,5,6,7}}, to"), 8) == 4
    assert hlo_census.group_size(ins("x), replica_groups=[2,4]<=[8], to"), 8) == 4
    mesh = "x), replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}, use"
    assert hlo_census.group_size(ins(mesh), 8) == 4
    assert hlo_census.group_size(ins("x), to_apply=%add"), 8) == 8


def test_bytes_of_result_types():
    assert hlo_module.nbytes("bf16[4,8]{1,0:T(8,128)(2,1)}") == 64
    assert hlo_module.nbytes("(f32[2]{0}, s8[3]{0}, pred[5]{0})") == 8 + 3 + 5
    assert hlo_module.nbytes("s4[3]{0}") == 2


def test_entry_parameters_in_order():
    text = "HloModule m\n\nENTRY %main (a: f32[2], b: s8[3]) -> f32[2] {\n"
    text += "  %a = f32[2]{0} parameter(0)\n  %b = s8[3]{0} parameter(1)\n"
    text += "  ROOT %c = f32[2]{0} add(%a, %a)\n}\n"
    assert hlo_module.entry_parameters(text) == ["f32[2]{0}", "s8[3]{0}"]


def test_tiled_layouts_pad_the_minor_dimensions():
    assert hlo_module.padded_nbytes("f32[6,32]{1,0:T(8,128)}") == 8 * 128 * 4
    assert hlo_module.padded_nbytes("s32[]{:T(128)}") == 128 * 4
    # minor-to-major {0,1}: the physical minor dimension is the first one
    assert hlo_module.padded_nbytes("f32[100,3]{0,1:T(8,128)}") == 8 * 128 * 4
    assert hlo_module.padded_nbytes("f32[16,256]{1,0}") == 16 * 256 * 4  # no tile, no padding


def test_async_collectives_count_their_results_and_known_trip_counts():
    text = """HloModule m

%body (p: (s32[], f32[64])) -> (s32[], f32[64]) {
  %p = (s32[], f32[64]) parameter(0)
  %x = f32[64]{0} get-tuple-element(%p), index=1
  %ag = ((f32[8]{0}, f32[8]{0}), (f32[64]{0}, f32[64]{0})) all-gather-start(%x, %x), GROUPS
  ROOT %t = (s32[], f32[64]) tuple(%p)
}

%cond (p: (s32[], f32[64])) -> pred[] {
  %p = (s32[], f32[64]) parameter(0)
  ROOT %c = pred[] fusion(%p), kind=kLoop, calls=%cmp
}

%cmp (p: (s32[], f32[64])) -> pred[] {
  %p = (s32[], f32[64]) parameter(0)
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%p, %n), direction=LT
}

ENTRY %main (a: f32[64]) -> (s32[], f32[64]) {
  %a = f32[64]{0} parameter(0)
  %i = (s32[], f32[64]) tuple(%a)
  ROOT %w = (s32[], f32[64]) while(%i), condition=%cond, body=%body, TRIPS
}
"""
    text = text.replace("GROUPS", "replica_groups=[1,8]<=[8], dimensions={0}")
    text = text.replace("TRIPS", 'backend_config={"known_trip_count":{"n":"3"}}')
    moved = hlo_census.collectives(text, 8)["all-gather"]
    # XLA's annotation (3) wins over the condition's constant (5); 2 × 256 B results, 7/8 sent
    assert moved.count == 3 and moved.bytes == 3 * (2 * 256 * 7 // 8)
    module = hlo_module.parse(text)
    assert hlo_module.trip_count(module, "cond") == 5  # found through the fusion it calls
    assert hlo_module.unknown_loops(text) == 0
    assert (
        hlo_module.unknown_loops(
            text.replace(', backend_config={"known_trip_count":{"n":"3"}}', "").replace(
                "constant(5)", "parameter(1)"
            )
        )
        == 1
    )
    assert hlo_module.tuple_elements("((f32[1], f32[2]), /*index=5*/s8[3])") == [
        "(f32[1], f32[2])",
        "s8[3]",
    ]


# jax 0.12's XLA:GPU, a dot on a dynamic slice of a scanned weight: cuBLAS called by XLA itself
# inside a dynamic-slice fusion, the contraction in the gemm's backend config
GEMM_HLO = """HloModule m

%dynamic-slice-fusion (p2: f32[1024,128], p0: f32[6,128,128]) -> (f32[1024,128], s8[64]) {
  %p2 = f32[1024,128]{1,0} parameter(0)
  %p0 = f32[6,128,128]{2,1,0} parameter(1)
  %c = s32[] constant(0)
  %ds = f32[1,128,128]{2,1,0} dynamic-slice(%p0, %c, %c, %c), dynamic_slice_sizes={1,128,128}
  %b = f32[128,128]{1,0} bitcast(%ds)
  ROOT %g = (f32[1024,128]{1,0}, s8[64]{0}) custom-call(%p2, %b), CONFIG
}

ENTRY %main (x: f32[1024,128], w: f32[6,128,128]) -> f32[1024,128] {
  %x = f32[1024,128]{1,0} parameter(0)
  %w = f32[6,128,128]{2,1,0} parameter(1)
  %f = (f32[1024,128]{1,0}, s8[64]{0}) fusion(%x, %w), kind=kCustom, calls=%dynamic-slice-fusion
  ROOT %r = f32[1024,128]{1,0} get-tuple-element(%f), index=0
}
""".replace(
    "CONFIG",
    'custom_call_target="__cublas$lt$matmul", '
    'metadata={op_name="jit(train_step)/decoder/while/body/cross_attn/k_proj/dot_general"}, '
    'backend_config={"gemm_backend_config":{"dot_dimension_numbers":'
    '{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],'
    '"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}',
)


def test_cublas_gemm_calls_count_as_matmuls():
    """2·1024·128 results × 128 contracted, in the census and in the kernel that fuses it."""
    assert hlo_census.matmul_flops(GEMM_HLO) == 2 * 1024 * 128 * 128
    (fused,) = [k for k in kernels.kernels(GEMM_HLO, targets.GPU_CHIPS["h100"]) if k.flops]
    assert fused.flops == 2 * 1024 * 128 * 128 and fused.opcode == "fusion"
    # the fusion has no op_name of its own: it is named, and classed, by the matmul it fuses
    assert fused.op_name.endswith("k_proj/dot_general") and fused.kind == "projections"


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu not installed")
def test_tpu_convolutions_count_the_matmuls_they_hold():
    """XLA:TPU compiles batched matmuls into convolutions whose windows meet one real element
    per output position (padding, input dilation): their valid taps give the matmuls' FLOPs,
    equal to the lowered module's dots."""
    devices = targets.compile_devices(targets.parse("v5e-1"))
    sharding = NamedSharding(jax.sharding.Mesh(np.array(devices), ("x",)), PartitionSpec())

    def attention_like(q, k, v):
        scores = jnp.einsum("btnh,bsnh->bnts", q, k)
        return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(scores), v)

    shape = jax.ShapeDtypeStruct((4, 64, 8, 32), jnp.bfloat16, sharding=sharding)
    grad = jax.jit(jax.grad(lambda q, k, v: attention_like(q, k, v).astype(jnp.float32).sum()))
    lowered = grad.lower(shape, shape, shape)
    compiled = lowered.compile().as_text()
    assert " convolution(" in compiled
    assert hlo_census.matmul_flops(compiled) == hlo_census.matmul_flops(
        lowered.as_text(dialect="hlo")
    )


def test_an_attribute_printed_over_several_lines_stays_with_its_instruction():
    """A Pallas kernel's ``kernel_metadata`` holds a newline, so XLA prints the rest of the
    instruction on lines of their own, one of them starting with ``}}``: the computation goes
    on (its later matmuls counted) and the continuation, with the op_name, joins the call."""
    text = """HloModule m

%body (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]) parameter(0)
  %x = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %k = f32[4,8]{1,0} custom-call(%x), custom_call_target="tpu_custom_call", KERNEL_METADATA
"xprof_metadata":"{\\"block_q\\": 128}
"}}, metadata={op_name="jit(step)/layers/self_attn/shard_map"}
  %w = f32[8,8]{1,0} constant({...})
  %d = f32[4,8]{1,0} dot(%k, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[4,8]) tuple(%p)
}

%cond (p: (s32[], f32[4,8])) -> pred[] {
  %p = (s32[], f32[4,8]) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[4,8]) -> (s32[], f32[4,8]) {
  %a = f32[4,8]{1,0} parameter(0)
  %i = (s32[], f32[4,8]) tuple(%a)
  ROOT %w = (s32[], f32[4,8]) while(%i), condition=%cond, body=%body, TRIPS
}
"""
    text = text.replace("KERNEL_METADATA", "frontend_attributes={kernel_metadata={")
    text = text.replace("TRIPS", 'backend_config={"known_trip_count":{"n":"3"}}')
    module = hlo_module.parse(text)
    assert [i.name for i in module.computations["body"]] == ["p", "x", "k", "w", "d", "t"]
    assert "self_attn/shard_map" in module.computations["body"][2].rest
    assert hlo_census.matmul_flops(module) == 3 * 2 * 4 * 8 * 8

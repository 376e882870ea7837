"""Device mesh, logical-axis rules and sharded initialization of the train state.

The mesh has three axes: ``data`` (pure data parallelism), ``fsdp`` (data parallelism with
parameters and optimizer state sharded, ZeRO-3 style) and ``tensor`` (Megatron-style splitting
of heads and the FFN width). Every parameter carries logical axis names (``layers``, ``embed``,
``heads``, ``kv_heads``, ``kv``, ``qkv``, ``mlp``, ``vocab``, ``norm``, ``positions``);
``LOGICAL_AXIS_RULES``
maps them to mesh axes in priority order (flax skips a rule whose mesh axis an earlier dimension
of the same array already uses), and activations are constrained to ``(batch, length, embed)`` at
block boundaries.

Initialization never materializes an unsharded state: ``jax.eval_shape`` gives the abstract
parameters with their logical names, the rules turn them into ``NamedSharding``s, and
``jax.jit(init, out_shardings=...)`` creates each shard on its device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field

MESH_AXES = ("data", "fsdp", "tensor")
# Every logical axis name a parameter or activation carries.
LOGICAL_AXES = (
    "batch",
    "length",
    "embed",
    "heads",
    "kv_heads",
    "kv",
    "qkv",
    "mlp",
    "vocab",
    "layers",
    "norm",
    "positions",
)
# logical axis -> mesh axes ("" replicated, "a,b" both): the defaults of ``config.mesh.rules``.
DEFAULT_RULES = {
    "batch": "data,fsdp",  # rows of a batch: data parallel over data × fsdp
    "embed": "fsdp",  # d_model dimension of parameters: ZeRO-3 sharding over fsdp
    "heads": "tensor",  # attention heads: Megatron tensor parallelism
    "kv_heads": "tensor",  # key/value heads (grouped-query attention): with the query heads
    "mlp": "tensor",  # FFN width: tensor parallelism
    "vocab": "tensor",  # vocabulary of embeddings and output projection
    "length": "",  # sequence positions (no sequence parallelism)
    "kv": "",  # per-head dimension
    "qkv": "",  # the q/k/v slices of a fused self-attention kernel
    "layers": "",  # the scanned depth axis: always replicated (each scan step takes a slice)
    "norm": "",  # LayerNorm scales and biases
    "positions": "",  # learned position-embedding rows
}


@dataclasses.dataclass(frozen=True)
class MeshFields:
    """``config.mesh``: devices along each mesh axis (at most one -1: all the others leave;
    checked with the device count by :func:`mesh_shape`), plus ``mesh.rules``
    (:data:`DEFAULT_RULES`, checked by :func:`logical_axis_rules`; undeclared, kept as the
    config gives them: ``config_schema.subgroup``)."""

    data: int = field(
        -1,
        "data-parallel replicas; -1 (one axis at most): the devices the others leave",
        low=-1,
        resumable=True,
    )
    fsdp: int = field(
        1,
        "parameter/optimizer-state shards, ZeRO-3 (data parallel too); >= 1 or -1",
        low=-1,
        resumable=True,
    )
    tensor: int = field(
        1,
        "tensor-parallel shards of heads, FFN width and vocabulary; >= 1 or -1",
        low=-1,
        resumable=True,
    )
    rules: tuple[tuple[str, str], ...] | None = config_schema.subgroup(
        "logical axis -> mesh axes, as given (None: DEFAULT_RULES)"
    )


def default_config() -> ml_collections.ConfigDict:
    """``config.mesh``: :class:`MeshFields` and the logical-axis ``rules``."""
    c = config_schema.config_dict(MeshFields)
    c.rules = ml_collections.ConfigDict(DEFAULT_RULES)  # logical axis -> "mesh,axes" or ""
    return c


def logical_axis_rules(mesh_config: MeshFields) -> tuple[tuple[str, Any], ...]:
    """``mesh.rules`` as flax's ``(logical axis, mesh axes)`` pairs, validated.

    Each value is a comma-separated list of mesh axes (``"data,fsdp"``) or ``""`` (replicated);
    logical axes not given keep their ``DEFAULT_RULES`` value. Flax applies the rules in order
    and skips a mesh axis an earlier dimension of the same array already uses.
    """
    given = dict(mesh_config.rules or ())
    for name in given:
        if name not in LOGICAL_AXES:
            raise ValueError(f"mesh.rules.{name}: unknown logical axis; allowed are {LOGICAL_AXES}")
    rules = []
    for name in LOGICAL_AXES:
        value = given.get(name, DEFAULT_RULES[name])
        if not isinstance(value, str):
            raise ValueError(f"mesh.rules.{name}={value!r} must be a string like 'data,fsdp' or ''")
        axes = tuple(a.strip() for a in value.split(",") if a.strip())
        for axis in axes:
            if axis not in MESH_AXES:
                raise ValueError(
                    f"mesh.rules.{name}={value!r}: {axis!r} is not a mesh axis {MESH_AXES}"
                )
        if len(set(axes)) != len(axes):
            raise ValueError(f"mesh.rules.{name}={value!r} names a mesh axis twice")
        if name == "layers" and axes:
            raise ValueError(
                f"mesh.rules.layers={value!r} must be '': the scanned layer axis is never sharded"
            )
        rules.append((name, None if not axes else axes[0] if len(axes) == 1 else axes))
    return tuple(rules)


LOGICAL_AXIS_RULES = logical_axis_rules(MeshFields())


def validate(mesh_config: ml_collections.ConfigDict) -> None:
    """One-line error for the first bad ``mesh.*`` field, before the devices are known: an axis
    size that is neither a positive integer nor -1, two axes at -1, or a bad ``mesh.rules``."""
    rules = mesh_config.get("rules")
    if rules is not None and not isinstance(rules, (ml_collections.ConfigDict, dict)):
        raise ValueError(f"mesh.rules={rules!r} must be a group of logical axes")
    mesh = config_schema.typed(MeshFields, mesh_config, "mesh.")
    _check_sizes(mesh)
    logical_axis_rules(mesh)


def _check_sizes(mesh_config: MeshFields) -> list[int]:
    """The (data, fsdp, tensor) sizes as given, each a positive integer or -1 (at most one)."""
    sizes = [getattr(mesh_config, a) for a in MESH_AXES]
    for axis, size in zip(MESH_AXES, sizes, strict=True):
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise ValueError(f"mesh.{axis}={size!r} must be a positive integer or -1")
    if sizes.count(-1) > 1:
        raise ValueError(f"mesh={dict(zip(MESH_AXES, sizes, strict=True))}: at most one axis -1")
    return sizes


def mesh_shape(mesh_config: MeshFields, device_count: int) -> tuple[int, ...]:
    """The (data, fsdp, tensor) sizes for ``device_count`` devices, -1 filled in."""
    sizes = _check_sizes(mesh_config)
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if device_count % known:
            raise ValueError(
                f"mesh={dict(zip(MESH_AXES, sizes, strict=True))} does not divide the "
                f"{device_count} devices"
            )
        sizes[sizes.index(-1)] = device_count // known
    if int(np.prod(sizes)) != device_count:
        raise ValueError(
            f"mesh={dict(zip(MESH_AXES, sizes, strict=True))} needs {int(np.prod(sizes))} "
            f"devices; {device_count} are available"
        )
    return tuple(sizes)


def make_mesh(
    mesh_config: MeshFields, devices: list[jax.Device] | None = None
) -> jax.sharding.Mesh:
    """A ``(data, fsdp, tensor)`` mesh over ``devices`` (default: all), axis types Auto."""
    devices = jax.devices() if devices is None else devices
    shape = mesh_shape(mesh_config, len(devices))
    return jax.make_mesh(
        shape,
        MESH_AXES,
        axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES),
        devices=devices,
    )


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Batches are split by rows over ``data × fsdp`` and replicated over ``tensor``."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp")))


def data_parallel_size(mesh: jax.sharding.Mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]


@dataclasses.dataclass
class ShardedState:
    """How to create (or restore) the train state on a mesh without materializing it whole.

    ``abstract`` is ``{"params", "opt_state"}`` as ``jax.ShapeDtypeStruct``s carrying their
    shardings (the restore target); ``create()`` initializes it, each shard on its device;
    ``create_params()`` only the initial parameters θ₀.
    """

    abstract: dict[str, Any]
    create: Callable[[], tuple[Any, Any]]
    create_params: Callable[[], Any]


def abstract_parameters(
    init_variables: Callable[[], dict[str, Any]],
    mesh: jax.sharding.Mesh,
    rules: tuple[tuple[str, Any], ...] = LOGICAL_AXIS_RULES,
) -> Any:
    """The model's parameters as ``jax.ShapeDtypeStruct``s carrying their ``NamedSharding``s
    on ``mesh`` (from the logical axis names; nothing is allocated)."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        boxed = jax.eval_shape(init_variables)["params"]
        specs = nn.get_partition_spec(boxed)
        param_shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
        _check_divisible(_strip_metadata(boxed), specs, param_shardings, mesh)
        return jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            _strip_metadata(boxed),
            param_shardings,
        )


def _check_divisible(params: Any, specs: Any, shardings: Any, mesh: jax.sharding.Mesh) -> None:
    """One-line error for the first parameter dimension the rules split over mesh axes whose
    size does not divide it (e.g. 2 key/value heads over tensor=4), naming the logical axis
    and its rule to change."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    for (path, leaf), names, sh in zip(
        flat, jax.tree.leaves(specs, is_leaf=_is_spec), jax.tree.leaves(shardings), strict=True
    ):
        for dim, (size, axes) in enumerate(zip(leaf.shape, sh.spec, strict=False)):
            axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
            split = int(np.prod([mesh.shape[a] for a in axes]))
            if size % split:
                name = names[dim]
                raise ValueError(
                    f"parameter {'/'.join(_names(path))} has {size} along logical axis "
                    f"{name!r}, which mesh.rules.{name}={','.join(axes)!r} splits {split} "
                    f"ways; choose sizes it divides or set mesh.rules.{name}='' (replicated)"
                )


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


def sharded_state(
    init_variables: Callable[[], dict[str, Any]],
    optimizer_init: Callable[[Any], Any],
    mesh: jax.sharding.Mesh,
    rules: tuple[tuple[str, Any], ...] = LOGICAL_AXIS_RULES,
) -> ShardedState:
    """Plan the sharded train state.

    ``init_variables()`` returns the model's (boxed, logically annotated) variables; only its
    ``"params"`` collection is kept. Optimizer-state leaves shaped like a parameter (Adam's
    moments, accumulated gradients) are sharded like it (``like_params``); the rest (counts)
    are replicated.
    """
    abstract_params = abstract_parameters(init_variables, mesh, rules)
    param_shardings = jax.tree.map(lambda a: a.sharding, abstract_params)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        opt_shapes = jax.eval_shape(optimizer_init, abstract_params)
        opt_shardings = like_params(
            opt_shapes, abstract_params, NamedSharding(mesh, PartitionSpec())
        )
        opt_init = jax.jit(optimizer_init, out_shardings=opt_shardings)
        abstract_opt = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            opt_shapes,
            opt_shardings,
        )
        init_params = jax.jit(
            lambda: nn.unbox(init_variables()["params"]), out_shardings=param_shardings
        )

    def create_params() -> Any:
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            return init_params()

    def create() -> tuple[Any, Any]:
        params = create_params()
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            return params, opt_init(params)

    abstract = {"params": abstract_params, "opt_state": abstract_opt}
    return ShardedState(abstract, create, create_params)


def like_params(tree: Any, abstract_params: Any, default: jax.sharding.Sharding) -> Any:
    """Shardings for ``tree`` (e.g. an optimizer state): a leaf whose key path ends with a
    parameter's key path and has that parameter's shape gets the parameter's sharding; any
    other leaf gets ``default``."""
    by_path = {
        _names(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(abstract_params)[0]
    }

    def pick(path, leaf):
        names = _names(path)
        for start in range(len(names)):
            param = by_path.get(names[start:])
            if param is not None and param.shape == leaf.shape:
                return param.sharding
        return default

    return jax.tree_util.tree_map_with_path(pick, tree)


def _names(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def _strip_metadata(boxed: Any) -> Any:
    """Values of a boxed (``nn.Partitioned``) tree, without applying sharding constraints."""
    return jax.tree.map(
        lambda x: x.unbox(apply_constraint=False) if isinstance(x, nn.meta.AxisMetadata) else x,
        boxed,
        is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata),
    )


def state_shardings(state: ShardedState) -> tuple[Any, Any]:
    """(params, opt_state) shardings of a planned state: where the train step writes them."""
    return tuple(
        jax.tree.map(lambda a: a.sharding, state.abstract[key]) for key in ("params", "opt_state")
    )

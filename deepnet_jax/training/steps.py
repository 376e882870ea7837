"""The jitted training and evaluation steps, and the loss they share.

A batch is a dict of [B, T] arrays (``inputs``, ``targets``, ``weights``, ``src`` for an
encoder-decoder, packing keys when packed); :mod:`deepnet_jax.model.inputs` turns it into the
model's arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.training import diagnostics, losses, preemption, source_sensitivity

Batch = dict[str, jax.Array]
BAD_IN_A_ROW = "bad_in_a_row"  # the metric carrying the non-finite gate to the next step


def make_loss_fn(
    model: nn.Module, arch: str, label_smoothing: float = 0.0, loss_chunk: int = 0
) -> Callable:
    """Build ``loss_fn(params, batch, dropout_rng, deterministic)``.

    It returns ``(mean loss, sums)``: the mean (label-smoothed) loss over non-padding target
    tokens, and float32 sums ``loss_sum`` (smoothed), ``nll_sum`` (plain cross-entropy),
    ``weight`` (target tokens) and ``correct`` (argmax hits) that add up across micro-batches
    and devices exactly. ``loss_chunk`` > 0: the output head and the loss run that many target
    positions at a time, each chunk's gradients computed beside its loss
    (:func:`deepnet_jax.training.losses.fused_mean_loss`), never the whole batch's float32 logits
    at once.
    """

    def head(head_params: dict, x_BTD: jax.Array) -> jax.Array:
        return model.apply({"params": head_params}, x_BTD, method="head")

    def loss_fn(params, batch: Batch, dropout_rng: jax.Array, deterministic: bool):
        outputs = model.apply(
            {"params": params},
            *model_inputs.model_args(arch, batch),
            deterministic=deterministic,
            rngs={"dropout": dropout_rng},
            **model_inputs.model_kwargs(batch),
            logits=not loss_chunk,
        )
        targets, weights = batch["targets"], batch["weights"]
        if loss_chunk:
            names = losses.head_params(head, params, outputs[:, :1])
            mean, sums = losses.fused_mean_loss(
                head,
                {n: params[n] for n in names},
                outputs,
                targets,
                weights,
                label_smoothing,
                loss_chunk,
            )
            return mean, jax.lax.stop_gradient(sums)
        sums = losses.token_sums(outputs, targets, weights, label_smoothing)
        return sums["loss_sum"] / jnp.maximum(sums["weight"], 1.0), sums

    return loss_fn


def make_train_step(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    base_key: jax.Array,
    layer_grad_norms: bool = False,
    halt_after: int = 0,
    state_shardings: tuple[Any, Any] | None = None,
) -> Callable:
    """Jitted ``(params, opt_state, batch, step, learning_rate[, bad_in_a_row]) -> (params,
    opt_state, metrics)``, donating the state; ``learning_rate`` (a float32 scalar: the update's
    entry of :func:`deepnet_jax.training.optimizers.learning_rates`) goes to ``optimizer.update`` as
    its keyword argument.

    Dropout keys are ``fold_in(base_key, step)``, so a step's randomness depends only on its
    index. ``metrics`` holds the loss function's sums plus ``loss`` (the optimized mean),
    ``grad_norm`` (global L2 norm of this micro-batch's gradient), ``update_norm`` (of the
    applied update; 0 on micro-steps that only accumulate) and ``param_norm`` (after the step).
    With ``layer_grad_norms``, ``metrics["layer_grad_norm"]`` holds each sublayer type's
    per-layer gradient norms (``diagnostics.layer_grad_norms``, [L] each).
    A batch entry ``preemption.STOP_KEY`` (int32 [B], each process's stop flag on its rows) is
    not fed to the model; its max over the global batch comes back as the metric of that name.

    The non-finite gate (``halt_after`` = n > 0): the step takes ``bad_in_a_row`` (int32
    scalar: the previous steps' count of consecutive non-finite losses or gradients, the
    previous step's ``metrics["bad_in_a_row"]``) and returns it updated. Once it reaches n the
    step changes nothing, so the state still is the one the host halts on when it reads that
    step's metrics a step late (the trainer saves it as the diagnostic state).

    ``state_shardings`` (``sharding.state_shardings`` of the planned state): the new params and
    optimizer state are written with exactly these shardings (metrics replicated), so each
    output reuses its donated input's buffer. Without it the compiler picks the outputs'
    shardings, and XLA:GPU can pick replicated ones: a second, whole copy of the state.
    """
    update = _update_fn(loss_fn, optimizer, base_key, layer_grad_norms)
    step_fn = _gated(update, halt_after) if halt_after else update
    jit_options = {}
    if state_shardings is not None:
        mesh = jax.tree.leaves(state_shardings[0])[0].mesh
        jit_options["out_shardings"] = (*state_shardings, NamedSharding(mesh, PartitionSpec()))

    @functools.partial(jax.jit, donate_argnums=(0, 1), **jit_options)
    def train_step(params, opt_state, batch: Batch, step, learning_rate, bad_in_a_row=None):
        args = (params, opt_state, dict(batch), step, learning_rate)
        return step_fn(*args, bad_in_a_row) if halt_after else step_fn(*args)

    return train_step


def _update_fn(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    base_key: jax.Array,
    layer_grad_norms: bool,
) -> Callable:
    """``update(params, opt_state, batch, step, learning_rate, proceed=None) -> (params,
    opt_state, metrics)``: one optimizer update (see :func:`make_train_step` for the metrics).

    With ``proceed`` (a bool scalar) the optimizer's update is applied if it is true; if false
    the state comes back unchanged (``update_norm`` and ``param_norm`` 0). The forward and
    backward passes run either way (:func:`_gated`)."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def apply(params, opt_state, grads, learning_rate):
        updates, opt_state = optimizer.update(grads, opt_state, params, learning_rate=learning_rate)
        params = optax.apply_updates(params, updates)
        return params, opt_state, optax.tree.norm(updates), optax.tree.norm(params)

    def update(params, opt_state, batch: Batch, step, learning_rate, proceed=None):
        stop = batch.pop(preemption.STOP_KEY, None)
        (loss, sums), grads = grad_fn(params, batch, jax.random.fold_in(base_key, step), False)
        args = (params, opt_state, grads, learning_rate)
        if proceed is None:
            params, opt_state, update_norm, param_norm = apply(*args)
        else:
            params, opt_state, update_norm, param_norm = _apply_if(proceed, apply, args)
        metrics = {
            **sums,
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "update_norm": update_norm,
            "param_norm": param_norm,
        }
        if layer_grad_norms:
            metrics["layer_grad_norm"] = diagnostics.layer_grad_norms(grads)
        if stop is not None:  # any process's stop flag, the same on all (an all-reduce)
            metrics[preemption.STOP_KEY] = jnp.max(stop)
        return params, opt_state, metrics

    return update


def _apply_if(proceed: jax.Array, apply: Callable, args: tuple) -> tuple:
    """``apply(*args)`` if ``proceed`` (a bool scalar), else ``args``' state unchanged with zero
    norms (:func:`_hold`). On GPUs the update always runs and a select per leaf keeps the old
    state (``jnp.where(proceed, new, old)``, fused into the update's own kernels): a
    ``lax.cond``'s output buffer is not the donated state's, and XLA:GPU copies the whole
    updated state into it. On CPUs and TPUs a ``lax.cond`` branches around the update: with the
    select XLA:CPU copied the optimizer's moments at the step's start, live through the forward
    and backward passes, and XLA:TPU planned the 1,000-layer model 5 GiB higher on a v5p-8
    (docs/scaling.md, "The optimizer's gate"). The platform is the compile target's, chosen
    when the step is lowered."""
    held = _hold(jax.eval_shape(apply, *args))
    branch = functools.partial(_branch, apply, held)
    select = functools.partial(_select, apply, held)
    return jax.lax.platform_dependent(proceed, *args, cuda=select, rocm=select, default=branch)


def _branch(apply: Callable, held: Callable, proceed: jax.Array, *args) -> tuple:
    """The CPUs' and TPUs' gate: ``apply(*args)`` or ``held(*args)`` in a ``lax.cond``."""
    return jax.lax.cond(proceed, apply, held, *args)


def _select(apply: Callable, held: Callable, proceed: jax.Array, *args) -> tuple:
    """The GPUs' gate: both computed, one kept per leaf (a non-finite update in the discarded
    side does not reach the kept one)."""
    new, old = apply(*args), held(*args)
    return jax.tree.map(lambda a, b: jnp.where(proceed, a, b), new, old)


def _hold(shapes: tuple) -> Callable:
    """The gate's closed branch: ``(params, opt_state, grads, learning_rate) -> (params,
    opt_state, 0, 0)``, the zeros of the norms' dtypes in ``shapes`` (``apply``'s outputs)."""

    def hold(params, opt_state, grads, learning_rate):
        del grads, learning_rate
        return params, opt_state, *(jnp.zeros(s.shape, s.dtype) for s in shapes[2:])

    return hold


def _gated(update: Callable, halt_after: int) -> Callable:
    """``update`` behind the non-finite gate: with ``bad_in_a_row`` (consecutive non-finite
    steps before this one) at ``halt_after`` it changes nothing (zero metrics); the returned
    metrics carry the count updated under :data:`BAD_IN_A_ROW`.

    The forward and backward passes always run; the gate holds only the optimizer's elementwise
    update (``update``'s ``proceed``, :func:`_apply_if`). Around the whole update, the
    conditional's branch held the scans, and XLA copied every stacked buffer the loops carry
    (docs/scaling.md, "The kernel model")."""

    def gated(params, opt_state, batch, step, learning_rate, bad_in_a_row):
        proceed = bad_in_a_row < halt_after
        params, opt_state, metrics = update(params, opt_state, batch, step, learning_rate, proceed)
        metrics = jax.tree.map(lambda m: jnp.where(proceed, m, jnp.zeros_like(m)), metrics)
        finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(metrics["grad_norm"])
        counted = jnp.where(finite, 0, bad_in_a_row + 1)
        metrics[BAD_IN_A_ROW] = jnp.where(proceed, counted, bad_in_a_row).astype(jnp.int32)
        return params, opt_state, metrics

    return gated


def make_eval_step(model: nn.Module, arch: str) -> Callable:
    """Jitted ``(params, batch) -> sums`` of the plain (unsmoothed) NLL, without dropout, and
    ``examples``: the rows holding target tokens (the examples scored; empty rows fill batches).

    For an encoder-decoder the sums also hold ``shifted_nll_sum``: the NLL of the same targets
    with each row's source swapped for another row's
    (:mod:`deepnet_jax.training.source_sensitivity`).
    """
    loss_fn = make_loss_fn(model, arch, 0.0)

    @jax.jit
    def eval_step(params, batch: Batch):
        sums = loss_fn(params, batch, jax.random.key(0), True)[1]
        sums["examples"] = jnp.sum(jnp.any(batch["weights"] > 0, axis=1))
        if arch == "encdec":
            shifted = source_sensitivity.with_shifted_sources(batch)
            sums["shifted_nll_sum"] = loss_fn(params, shifted, jax.random.key(0), True)[1][
                "nll_sum"
            ]
        return sums

    return eval_step


def split_loss(eval_step: Callable, params: Any, batches: Iterator[Batch]) -> dict[str, float]:
    """Token-weighted NLL (``loss``), ``perplexity`` = exp(loss) and ``accuracy`` over all
    ``batches`` (placed on the devices) of a split; for an encoder-decoder also
    ``source_sensitivity`` (nats per target token the NLL rises by when sources are swapped
    between rows); ``loss_examples``: how many examples (rows with targets) these cover."""
    sums: dict[str, float] = {}
    for batch in batches:
        out = jax.device_get(eval_step(params, batch))
        for key in ("nll_sum", "weight", "correct", "shifted_nll_sum", "examples"):
            if key in out:
                sums[key] = sums.get(key, 0.0) + float(out[key])
    if not sums.get("weight"):
        raise ValueError("the evaluation split has no target tokens")
    nll = sums["nll_sum"] / sums["weight"]
    result = {
        "loss": nll,
        "perplexity": float(np.exp(min(nll, 50.0))),
        "accuracy": sums["correct"] / sums["weight"],
        "loss_examples": int(sums["examples"]),
    }
    if "shifted_nll_sum" in sums:
        result["source_sensitivity"] = source_sensitivity.per_token(
            sums["nll_sum"], sums["shifted_nll_sum"], sums["weight"]
        )
    return result


def nbytes(tree: Any) -> int:
    """Bytes of the arrays (or shape/dtype structs) of ``tree``."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))

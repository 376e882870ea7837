"""The plan's compiled train step run as the trainer's step: one compile per run.

``model.remat_policy='auto'`` compiles the run's train step for its candidates on the run's own
devices (:mod:`deepnet_jax.training.remat_auto`, :func:`deepnet_jax.training.memory_plan.
compile_step`); the chosen candidate's executable (a ``jax.stages.Compiled``) is the very
program the trainer's jitted step (:func:`deepnet_jax.training.abstract_step.train_step`, the
same function of the same config) would compile for the same inputs. :func:`reuse` makes it the
trainer's step, so a run whose step is planned compiles that step once, not twice.

The executable takes exactly the inputs it was compiled for: the state with the plan's shapes,
dtypes and shardings, the global batch of the plan's longest bucket
(``abstract_step.abstract_batch``: rows × ``data.max_len``, its keys, split over the mesh's
data-parallel devices), an int32 step, a float32 learning rate and the int32 non-finite
count. The trainer's jitted step stays, and runs instead (compiling once per new input shape,
as jit does):

* for the whole run, when the plan was compiled for another config than the run's
  (``RunConfig`` equality: every field, e.g. a seed, which fixes the dropout keys) or for a
  state unlike the run's (another tree, shape, dtype or sharding — another mesh, say); no
  plan at all (a named ``remat_policy``) is the same case;
* for a batch whose keys, shapes, dtypes or shardings differ from the planned batch's: with
  ``data.max_tokens`` > 0 every bucket but the longest (each compiles its own step, once).

A mismatch never runs the executable on the wrong inputs: the batch is compared before every
call, and ``jax.stages.Compiled`` itself raises on arguments it was not compiled for (a
TypeError for another shape, dtype or tree, a ValueError for another sharding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from deepnet_jax.scale import sharding
from deepnet_jax.training.run_config import RunConfig

if TYPE_CHECKING:
    from deepnet_jax.training.memory_plan import CompiledStep


def signature(tree: Any) -> tuple[Any, tuple[tuple[Any, ...], ...]]:
    """(tree structure, (shape, dtype, sharding) of each leaf) of arrays or
    ``jax.ShapeDtypeStruct``s: what a compiled executable checks its arguments against."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((tuple(x.shape), np.dtype(x.dtype), x.sharding) for x in leaves)


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """The trainer's step: ``executable`` (the plan's) for a batch of ``batch``'s signature,
    ``jitted`` (``abstract_step.train_step``) for any other; both take ``(params, opt_state,
    batch, step, learning_rate, bad_in_a_row)`` and donate the state."""

    executable: Any  # jax.stages.Compiled
    jitted: Callable
    batch: tuple[Any, tuple[tuple[Any, ...], ...]]  # signature(planned batch)

    def __call__(self, params, opt_state, batch, step, learning_rate, bad_in_a_row):
        args = (params, opt_state, batch, step, learning_rate, bad_in_a_row)
        if signature(batch) == self.batch:
            return self.executable(*args)
        return self.jitted(*args)


def reuse(
    jitted: Callable,
    planned: CompiledStep | None,
    config: RunConfig,
    state: sharding.ShardedState,
) -> Callable:
    """The run's train step: a :class:`PlannedStep` on ``planned``'s executable when it was
    compiled for ``config`` and a state of ``state``'s signature, else ``jitted`` itself
    (see the module docstring for when)."""
    if planned is None or planned.config != config:
        return jitted
    if signature(planned.state.abstract) != signature(state.abstract):
        return jitted
    return PlannedStep(planned.executable, jitted, signature(planned.batch))

"""The optimizer's side of ``model.parameterization``: AdamW with each parameter group's own
learning rate, ε and weight decay (CompleteP, Dey et al. 2025, Table 1 at α = 1; the groups and
their factors are :mod:`deepnet_jax.model.parameterization`'s).

Each group g (its label: ``parameterization.labels``) gets, from the base η, ε and λ of
``config.optimizer`` and its factors (lr_g, ε_g, λ_g) (``parameterization.scales``):

    u_g = −η_t·lr_g·( m̂/(√v̂ + ε·ε_g) + λ·λ_g·p ),

η_t the update's learning rate (``optimizers.scale_by_learning_rate_argument``), m̂, v̂ Adam's
bias-corrected moments with the shared β1, β2: PyTorch's AdamW with per-group ``lr``, ``eps``
and ``weight_decay``, which the authors' code sets (``param_group['lr'] = lr·lr_scale``).
``standard`` builds no groups: :func:`deepnet_jax.training.optimizers.make_optimizer` keeps its
one chain.
"""

from __future__ import annotations

from typing import Any

import optax

from deepnet_jax.model import parameterization


def grouped_adamw(config: Any) -> optax.GradientTransformationExtraArgs:
    """For a run's config (a ``RunConfig``: its ``optimizer`` and ``model`` groups), Adam's
    direction, the decoupled weight decay and the group's learning-rate factor, per parameter
    group of ``config.model``'s parameterization: ``optax.partition`` over
    ``parameterization.labels`` of the parameters, each label's chain
    ``scale_by_adam(ε·ε_g) → add_decayed_weights(λ·λ_g) → scale(lr_g)``. The learning rate
    itself (η_t) is applied after, to every group alike."""
    o = config.optimizer
    transforms = {
        label: optax.chain(
            optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps * scale.eps),
            optax.add_decayed_weights(o.weight_decay * scale.weight_decay),
            optax.scale(scale.lr),
        )
        for label, scale in parameterization.scales(config.model).items()
    }
    return optax.partition(transforms, parameterization.labels)

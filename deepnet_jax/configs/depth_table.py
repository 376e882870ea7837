"""One run of the depth table (``deepnet_jax.experiments.depth_table``) as a training config:
``TASK,SCHEME,N[,SEED]`` picks the task (reversal, reversal64), the scheme and N encoder and N
decoder layers under the table's one recipe, so that the planner and ``train.py`` see exactly
what the experiment trains, e.g. the 1,000-layer column's memory on this machine:

    python -m deepnet_jax.cli.plan --config=depth_table:reversal64,deepnorm,500 \\
        --target=cpu:1
"""

import ml_collections

from deepnet_jax.configs import depth_table_recipe


def get_config(arg: str = "reversal64,deepnorm,6,0") -> ml_collections.ConfigDict:
    task, scheme, layers, *seed = arg.split(",")
    base = depth_table_recipe.base_config("quick")
    key = {
        "task": task,
        "scheme": scheme,
        "layers": int(layers),
        "seed": int(seed[0]) if seed else 0,
        "lr": base.optimizer.learning_rate,
        "warmup": base.schedule.warmup_steps,
    }
    return depth_table_recipe.make_config(base, key)

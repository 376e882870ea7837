"""Shipped configs, schedules against fairseq's formulas, label smoothing, gradient accumulation."""

import importlib
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from deepnet_jax import configs
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.training import config as train_config
from deepnet_jax.training import config_checks, losses, optimizers, train
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = configs.NAMES


def _load(name):
    return configs.load(name)


def test_resolve_fills_only_the_derived_fields_left_at_zero():
    c = _load("base")
    c.data.vocab_size, c.data.max_len = 300, 48
    r = train_config.resolve(c)
    assert (r.model.vocab_size, r.model.max_len) == (300, 48)
    assert train_config.resolve(c, tokenizer_size=271).model.vocab_size == 271
    assert c.model.vocab_size == c.model.max_len == 0  # the given config is left as it was
    c.model.vocab_size, c.model.max_len = 384, 64  # set explicitly: kept
    r = train_config.resolve(c, tokenizer_size=271)
    assert (r.model.vocab_size, r.model.max_len) == (384, 64)
    with pytest.raises(ValueError, match=r"model\.vocab_size=0 stands for the data's value"):
        architectures.build(_load("base").model)


def test_every_config_is_shipped():
    expected = {"base", "default", "iwslt14_deen", "wmt17_ende", "deepnet_1000l", "magneto_lm"}
    expected |= {"labml_shakespeare", "bert_mlm", "dlcl_30l", "ding_de_en"}
    expected |= {"deepnorm_lm", "subln_lm"}
    assert expected <= set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_validates_and_builds_its_model_abstractly(name):
    c = _load(name)
    if c.data.dataset == "local_parallel" and not c.data.source_dir:
        c.data.source_dir = "/path/to/iwslt14"  # the one field the user must give
    train.validate(c)
    c = config_checks.stand_in(RunConfig.from_config(c)).resolved()  # auto: the trainer plans
    assert c.model.vocab_size >= c.data.vocab_size
    assert c.data.max_len <= c.model.max_len
    model = architectures.build(c.model)
    tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    args = (tokens, tokens) if c.model.arch == "encdec" else (tokens,)
    shapes = jax.eval_shape(model.init, jax.random.key(0), *args)  # nothing allocated
    n = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    if name == "deepnet_1000l":
        assert 3.6e9 < n < 3.9e9, n  # the paper's 3.8B (its vocabulary differs)
    docstring = importlib.import_module(f"deepnet_jax.configs.{name}").__doc__
    if name != "base":
        assert f"--config={name}" in docstring  # the run command


def _lr(name, step, **kw):
    c = _load("base")
    c.optimizer.learning_rate = 1e-3
    c.total_steps = 1000
    c.schedule.name = name
    c.schedule.warmup_steps = 100
    c.schedule.warmup_init_lr = 1e-7
    for k, v in kw.items():
        c.schedule[k] = v
    train.validate(c)
    return float(optimizers.learning_rate_schedule(RunConfig.from_config(c))(step))


def _warmup(step):
    return 1e-7 + (1e-3 - 1e-7) * step / 100


@pytest.mark.parametrize("step", [0, 1, 50, 99, 100, 101, 400, 999, 1000])
def test_schedules_match_fairseq_formulas(step):
    rel = {"rtol": 1e-5, "atol": 1e-10}  # float32 schedules
    warm = step < 100
    expect_inv = _warmup(step) if warm else 1e-3 * math.sqrt(100 / step)
    np.testing.assert_allclose(_lr("inverse_sqrt", step), expect_inv, **rel)
    frac = (step - 100) / 900
    poly = _warmup(step) if warm else (1e-3 - 1e-5) * (1 - frac) ** 2 + 1e-5
    np.testing.assert_allclose(_lr("polynomial", step, power=2.0, end_lr=1e-5), poly, **rel)
    lin = _warmup(step) if warm else (1e-3 - 0) * (1 - frac)
    np.testing.assert_allclose(_lr("linear", step), lin, **rel)
    cos = _warmup(step) if warm else 1e-5 + (1e-3 - 1e-5) * (1 + math.cos(math.pi * frac)) / 2
    np.testing.assert_allclose(_lr("cosine", step, end_lr=1e-5), cos, **rel)
    np.testing.assert_allclose(_lr("constant", step), 1e-3, **rel)


@pytest.mark.parametrize("name", ["inverse_sqrt", "polynomial", "linear", "cosine", "constant"])
def test_learning_rate_table_is_the_schedule_at_every_update(name):
    c = _load("base")
    c.optimizer.learning_rate, c.total_steps = 1e-3, 300
    c.schedule.name, c.schedule.warmup_steps, c.schedule.end_lr = name, 40, 1e-5
    train.validate(c)
    run = RunConfig.from_config(c)
    table = optimizers.learning_rates(run)
    schedule = optimizers.learning_rate_schedule(run)
    assert table.shape == (300,) and table.dtype == np.float32
    expected = np.array([float(schedule(t)) for t in range(300)], np.float32)
    np.testing.assert_allclose(table, expected, rtol=1e-5)  # float32, computed vectorized


def test_optimizer_with_learning_rate_argument_equals_optax_adamw_on_the_schedule():
    """Clipping + Adam + decoupled weight decay with η fed per update == optax.adamw(schedule)."""
    c = _load("base")
    c.optimizer.learning_rate, c.optimizer.weight_decay, c.optimizer.grad_clip = 1e-2, 0.1, 1.0
    c.total_steps, c.schedule.name, c.schedule.warmup_steps = 6, "inverse_sqrt", 3
    train.validate(c)
    run = RunConfig.from_config(c)
    o = run.optimizer
    reference = optax.chain(
        optax.clip_by_global_norm(o.grad_clip),
        optax.adamw(
            optimizers.learning_rate_schedule(run), o.b1, o.b2, o.eps, weight_decay=o.weight_decay
        ),
    )
    ours, lrs = optimizers.make_optimizer(run), optimizers.learning_rates(run)
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.zeros(3)}
    p_ref, p_ours = params, params
    s_ref, s_ours = reference.init(params), ours.init(params)
    for t in range(6):
        grads = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
        u_ref, s_ref = reference.update(grads, s_ref, p_ref)
        u_ours, s_ours = ours.update(grads, s_ours, p_ours, learning_rate=lrs[t])
        p_ref, p_ours = optax.apply_updates(p_ref, u_ref), optax.apply_updates(p_ours, u_ours)
    for a, b in zip(jax.tree.leaves(p_ref), jax.tree.leaves(p_ours), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert float(jnp.abs(p_ours["w"] - params["w"]).max()) > 1e-3  # the updates are not vacuous


def test_runs_differing_only_in_learning_rate_or_schedule_lower_the_same_train_step():
    """The learning rate is the step's argument, so an lr sweep compiles one train step (and a
    persistent compilation cache serves every run after the first)."""
    from conftest import tiny_config

    def lowered_text(learning_rate, schedule):
        c = _load("base")
        c.model = tiny_config("decoder", "deepnorm")
        c.data.max_len = c.model.max_len
        c.optimizer.learning_rate, c.schedule.name, c.total_steps = learning_rate, schedule, 50
        train.validate(c)
        model = architectures.build(c.model)
        tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
        params = jax.eval_shape(
            lambda: model_inputs.init_params(
                model, "decoder", {"inputs": jnp.ones((2, 8), jnp.int32)}, 0
            )
        )
        opt = optimizers.make_optimizer(RunConfig.from_config(c))
        batch = {
            "inputs": tokens,
            "targets": tokens,
            "weights": jax.ShapeDtypeStruct((2, 8), jnp.float32),
        }
        step = train_steps.make_train_step(
            train_steps.make_loss_fn(model, "decoder"), opt, jax.random.key(0)
        )
        args = (params, jax.eval_shape(opt.init, params), batch, 0, np.float32(0))
        return step.lower(*args).as_text()

    assert lowered_text(1e-3, "constant") == lowered_text(4e-2, "inverse_sqrt")


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("schedule.warmup_steps", -1, r"schedule\.warmup_steps=-1 must be an integer >= 0"),
        ("schedule.warmup_steps", 1000, r"schedule\.warmup_steps=1000 must be below total_st"),
        ("schedule.end_lr", 1.0, r"schedule\.end_lr=1\.0 must be in \[0, learning_rate"),
        ("schedule.power", 0.0, r"schedule\.power=0\.0 must be > 0"),
        ("optimizer.name", "sgd", r"optimizer\.name='sgd'; allowed values are \('adamw',\)"),
        ("optimizer.learning_rate", 0.0, r"optimizer\.learning_rate=0\.0 must be a number > 0"),
        ("label_smoothing", 1.0, r"label_smoothing=1\.0 must be in \[0, 1\)"),
        ("grad_accum_steps", 0, r"grad_accum_steps=0 must be an integer >= 1"),
    ],
)
def test_bad_training_fields(field, value, match):
    c = _load("base")
    c.schedule.name = "cosine"
    c.total_steps, c.schedule.warmup_steps = 1000, 100
    section, _, key = field.rpartition(".")
    (c[section] if section else c)[key] = value
    with pytest.raises(ValueError, match=match):
        train.validate(c)


def test_label_smoothed_loss_equals_direct_computation():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
    targets = rng.integers(1, 7, size=(3, 5))
    weights = (rng.random((3, 5)) > 0.3).astype(np.float32)
    eps = 0.1
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps / 7)
    q[np.arange(3)[:, None], np.arange(5)[None], targets] += 1 - eps
    direct = -(q * logp).sum(-1)
    total, weight = losses.cross_entropy(jnp.asarray(logits), targets, weights, eps)
    np.testing.assert_allclose(float(total), (direct * weights).sum(), rtol=1e-5)
    np.testing.assert_allclose(float(weight), weights.sum())


def test_gradient_accumulation_equals_one_large_batch():
    """k micro-batches through optax.MultiSteps == one k-times batch (equal token counts).

    Compared where the comparison is well conditioned: Adam's moments after the one update,
    mu = (1 - b1)·g and nu = (1 - b2)·g², are smooth in the accumulated gradient g, so the two
    summation orders differ by float32 rounding only (≈ n·2⁻²⁴ of the largest gradient for n
    summed terms; 1e-4 of it leaves a wide margin). The parameters after one Adam step from a
    zero state are ≈ lr·g/(|g| + ε), which turns that rounding into differences of order lr
    wherever |g| ≈ ε, so they are not compared element-wise.
    """
    from conftest import init_params, tiny_config

    def config(k):
        c = _load("base")
        c.model = tiny_config("decoder", "deepnorm")  # accumulation acts on any architecture
        c.optimizer.grad_clip = 0.0
        c.schedule.name = "constant"
        c.grad_accum_steps = k
        c.label_smoothing = 0.1
        return c

    rng = np.random.default_rng(0)
    shape = (8, 6)
    big = {k: rng.integers(4, 40, shape).astype(np.int32) for k in ("inputs", "targets")}
    big["weights"] = np.ones(shape, np.float32)  # no padding: every micro-batch has 4×6 tokens
    halves = [{k: v[i * 4 : (i + 1) * 4] for k, v in big.items()} for i in range(2)]
    model = architectures.build(config(1).model)
    params0 = init_params(model, "decoder", jnp.asarray(big["inputs"]))
    moments, moved = [], []
    for k, batches in ((1, [big]), (2, halves)):
        opt = optimizers.make_optimizer(RunConfig.from_config(config(k)))
        loss_fn = train_steps.make_loss_fn(model, "decoder", 0.1)
        step = train_steps.make_train_step(loss_fn, opt, jax.random.key(0))
        params = jax.tree.map(jnp.copy, params0)
        state = opt.init(params)
        for i, b in enumerate(batches):
            params, state, _ = step(params, state, b, i, np.float32(1e-3))
        adam = optax.tree.get(state, "ScaleByAdamState")
        assert int(adam.count) == 1  # k micro-batches made exactly one update
        moments.append((adam.mu, adam.nu))
        moved.append(max(jax.tree.leaves(jax.tree.map(_max_abs_diff, params, params0))))
    assert min(moved) > 1e-4  # both runs applied their update
    for one, accumulated in zip(moments[0], moments[1], strict=True):
        scale = max(float(jnp.abs(x).max()) for x in jax.tree.leaves(one))
        assert scale > 0
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(accumulated), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4 * scale)


def _max_abs_diff(a: jax.Array, b: jax.Array) -> float:
    return float(jnp.abs(a - b).max())


@pytest.mark.parametrize("nan_policy", train_config.NAN_POLICIES)
def test_multisteps_wraps_the_optimizer_only_when_accumulating(nan_policy):
    """Accumulating or not, under either policy, the optimizer takes the learning rate as an
    argument (a GradientTransformationExtraArgs: apply_if_finite drops extra arguments on the
    way to an inner transformation that is not one, as optax.MultiSteps itself is not)."""
    run = RunConfig.from_config(_load("base")).replace(nan_policy=nan_policy)
    params = {"w": jnp.ones(3)}
    for k in (1, 4):
        optimizer = optimizers.make_optimizer(run.replace(grad_accum_steps=k))
        assert isinstance(optimizer, optax.GradientTransformationExtraArgs)
        state = optimizer.init(params)
        accumulating = optax.tree.get(state, "mini_step", None) is not None
        assert accumulating == (k > 1)
        updates, _ = optimizer.update(params, state, params, learning_rate=jnp.float32(0.1))
        assert all(np.isfinite(u).all() for u in jax.tree.leaves(updates))


def test_a_saved_config_lacking_fields_added_since_reads_as_the_code_that_saved_it():
    saved = train_config.default_config()
    saved.model.fused_qkv, saved.model.attention_impl = True, "xla"  # today's values differ
    assert saved.model.dropout_rng == "hash"  # today's default; runs saved before it used jax
    old = saved.to_dict()
    for path in train_config.ADDED_FIELDS:
        *groups, name = path.split(".")
        level = old
        for group in groups:
            level = level[group]
        del level[name]
    upgraded = train_config.upgrade_saved(old)
    config_checks.check_fields(upgraded)
    assert upgraded.model.fused_qkv is False and upgraded.model.attention_impl == "reference"
    assert upgraded.model.dropout_rng == "jax"
    kept = train_config.upgrade_saved(saved)  # fields that are there are left alone
    assert kept.model.fused_qkv is True and kept.model.attention_impl == "xla"
    typed = RunConfig.from_dict(old)  # a checkpoint's config read back: upgraded, then typed
    assert typed.model.dropout_rng == "jax" and typed.data.min_len == 2
    assert typed.to_dict() == upgraded.to_dict()

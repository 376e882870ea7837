"""torchscale interop against tests/fixtures/torchscale (tiny torchscale 0.3.0 models and their
logits, made by tests/fixtures/make_torchscale_fixture.py; no torch needed here): converted
logits, bitwise round trips, the import/export command and its fine-tuning run, bad inputs."""

import glob
import json
import logging
import os
import re
import shutil

import jax
import numpy as np
import pytest
from absl import flags
from conftest import init_params, jit_apply, tiny_config

from deepnet_jax.cli import torchscale as cli
from deepnet_jax.interop import torchscale as ts
from deepnet_jax.interop.torchscale import config_fields, files, runs
from deepnet_jax.model import architectures
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import loading as run_loading
from deepnet_jax.training import train

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "torchscale")
CASES = [
    (a, s)
    for a in ("encoder", "decoder", "encdec")
    for s in ("post_ln", "pre_ln", "deepnorm", "subln")
]
# float32 logits of O(1) through ≤ 5 layers: torchscale and XLA round differently by ~1e-6
TOLERANCE = 1e-5


def load_case(arch: str, scheme: str) -> tuple[dict, dict, dict]:
    """(state dict, torchscale config, arrays: tokens [2, 7], src [2, 6], logits [2, 7, V])."""
    with np.load(os.path.join(FIXTURES, f"{arch}_{scheme}.npz")) as z:
        state = {k.removeprefix("state/"): z[k] for k in z.files if k.startswith("state/")}
        return (
            state,
            json.loads(str(z["args"])),
            {k: z[k] for k in ("tokens", "src", "logits") if k in z.files},
        )


def logits(config, params, arrays) -> np.ndarray:
    model = architectures.build(config)
    args = (arrays["src"], arrays["tokens"]) if config.arch == "encdec" else (arrays["tokens"],)
    return np.asarray(jit_apply(model)({"params": params}, *args))


def max_error(config, params, arrays) -> float:
    real = arrays["tokens"] != 0
    return float(np.abs(logits(config, params, arrays) - arrays["logits"])[real].max())


def test_fixture_covers_the_twelve_cases():
    assert sorted(glob.glob(os.path.join(FIXTURES, "*.npz"))) == sorted(
        os.path.join(FIXTURES, f"{a}_{s}.npz") for a, s in CASES
    )


@pytest.mark.parametrize("arch, scheme", CASES)
def test_converted_logits_match_torchscale_and_round_trip_is_bitwise(arch, scheme):
    state, args, arrays = load_case(arch, scheme)
    config = ts.model_config_from_torchscale(args)
    assert (config.arch, config.scheme) == (arch, scheme)
    params = ts.params_from_torchscale(state, config)
    error = max_error(config, params, arrays)
    print(f"{arch}_{scheme}: max |Δlogits| at real positions = {error:.2e}")
    assert error <= TOLERANCE
    back = ts.params_to_torchscale(params, config)
    assert sorted(back) == sorted(state)
    for name, value in state.items():
        assert back[name].dtype == value.dtype and back[name].tobytes() == value.tobytes(), name


@pytest.mark.parametrize("arch, scheme", [("encdec", "subln"), ("decoder", "deepnorm")])
def test_fused_and_unrolled_layouts(arch, scheme):
    """q/k/v fused into one kernel and an unrolled stack read the same tensors."""
    state, args, arrays = load_case(arch, scheme)
    config = ts.model_config_from_torchscale(args)
    config.fused_qkv, config.scan_layers = True, False
    params = ts.params_from_torchscale(state, config)
    assert (
        "layers_0" in params["decoder"] and "qkv_proj" in params["decoder"]["layers_0"]["self_attn"]
    )
    assert max_error(config, params, arrays) <= TOLERANCE
    back = ts.params_to_torchscale(params, config)
    assert all(np.array_equal(back[k], state[k]) for k in state) and set(back) == set(state)


def test_model_config_round_trips_through_torchscale_args():
    for arch, scheme in CASES:
        config = ts.model_config_from_torchscale(load_case(arch, scheme)[1])
        again = ts.model_config_from_torchscale(ts.torchscale_args_from_config(config))
        assert again.to_dict() == config.to_dict(), (arch, scheme)


@pytest.mark.parametrize(
    "flags_, scheme",
    [
        ({"deepnorm": True}, "deepnorm"),  # forces post-norm, as torchscale's constructor
        ({}, "subln"),  # torchscale's defaults: subln=True, pre-norm
        ({"subln": False}, "pre_ln"),
        ({"subln": False, "decoder_normalize_before": False}, "post_ln"),
    ],
)
def test_scheme_from_torchscale_flags(flags_, scheme):
    config = ts.model_config_from_torchscale({"decoder_layers": 4, "vocab_size": 50, **flags_})
    assert config.scheme == scheme and config.arch == "decoder"
    assert config.d_model == 768 and config.activation == "gelu" and not config.scale_embedding


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"multiway": True}, "torchscale option multiway=True is not supported"),
        ({"xpos_rel_pos": True}, "option xpos_rel_pos=True is not supported"),
        ({"moe_freq": 2, "moe_expert_count": 4}, "option moe_freq=2 is not supported"),
        ({"rel_pos_buckets": 32, "max_rel_pos": 128}, "option rel_pos_buckets=32"),
        ({"layernorm_embedding": True}, "option layernorm_embedding=True"),
        ({"activation_fn": "swish"}, "option activation_fn='swish'.*allowed: relu, gelu"),
        (
            {"drop_path_rate": 0.1},
            "option drop_path_rate=0.1 is not supported: stochastic depth .*allowed: 0",
        ),
        (
            {"subln": True, "decoder_normalize_before": False},
            "decoder_normalize_before=False are no",
        ),
        ({"vocab_size": -1}, "vocab_size=-1: give the vocabulary size"),
    ],
)
def test_unsupported_torchscale_options_are_refused(extra, message):
    with pytest.raises(ValueError, match=message):
        ts.model_config_from_torchscale({"decoder_layers": 2, "vocab_size": 50, **extra})


def test_every_torchscale_field_is_mapped_refused_ignored_or_inert():
    """The fixtures' configs hold every attribute of torchscale 0.3.0's EncoderConfig,
    DecoderConfig and EncoderDecoderConfig (``vars(config)``): each is in a table of
    ``config_fields``; ignored and inert fields are neither read nor refused."""
    fields = set()
    for arch, scheme in CASES:
        fields |= set(load_case(arch, scheme)[1]) - {"encoder_learned_pos", "decoder_learned_pos"}
    assert len(fields) == 48 and {"bert_init", "drop_path_rate", "fsdp"} <= fields
    read = config_fields.MAPPED.keys() | config_fields.UNSUPPORTED.keys()
    unread = config_fields.IGNORED.keys() | config_fields.INERT.keys()
    assert fields <= read | unread, sorted(fields - read - unread)
    assert not read & unread and not config_fields.IGNORED.keys() & config_fields.INERT.keys()


def test_ignored_options_are_listed_in_one_warning(caplog):
    args = {"decoder_layers": 2, "vocab_size": 50}
    with caplog.at_level(logging.WARNING):
        ts.model_config_from_torchscale({**args, "checkpoint_activations": False, "fsdp": False})
    assert not caplog.records  # at their defaults: nothing to say
    with caplog.at_level(logging.WARNING):
        config = ts.model_config_from_torchscale(
            {**args, "checkpoint_activations": True, "fsdp": True}
        )
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    message = caplog.records[0].getMessage()
    assert message.startswith("torchscale options not read: checkpoint_activations=True, fsdp=True")
    assert "model.remat_policy" in message and "\n" not in message
    assert config.to_dict() == ts.model_config_from_torchscale(args).to_dict()


def test_bert_init_maps_to_the_torchscale_bert_init_and_back():
    args = {"decoder_layers": 2, "vocab_size": 50}
    assert ts.model_config_from_torchscale(args).init == "torchscale"
    config = ts.model_config_from_torchscale({**args, "bert_init": True})
    assert config.init == "torchscale_bert"
    back = ts.torchscale_args_from_config(config)
    assert back["bert_init"] is True and back["drop_path_rate"] == 0.0
    assert ts.model_config_from_torchscale(back).to_dict() == config.to_dict()


def test_state_dict_problems_name_the_tensor():
    state, args, _ = load_case("encdec", "deepnorm")
    config = ts.model_config_from_torchscale(args)
    bad = dict(state)
    bad["decoder.layers.0.encoder_attn.q_proj.weight"] = np.zeros((16, 8), np.float32)
    with pytest.raises(
        ValueError,
        match=r"'decoder\.layers\.0\.encoder_attn\.q_proj\.weight' has shape \[16, 8\]; "
        r".* expects \[16, 16\]",
    ):
        ts.params_from_torchscale(bad, config)
    with pytest.raises(ValueError, match=re.escape("'encoder.layers.1.ffn.fc2.bias' is missing")):
        ts.params_from_torchscale(
            {k: v for k, v in state.items() if k != "encoder.layers.1.ffn.fc2.bias"}, config
        )
    with pytest.raises(
        ValueError, match=re.escape("'decoder.layers.0.self_attn.A.q_proj.weight' has no place")
    ):
        ts.params_from_torchscale(
            {
                **state,
                "decoder.layers.0.self_attn.A.q_proj.weight": bad["decoder.embed_tokens.weight"],
            },
            config,
        )
    untied = {
        **state,
        "decoder.output_projection.weight": state["decoder.output_projection.weight"] + 1,
    }
    with pytest.raises(ValueError, match=re.escape("differs from 'decoder.embed_tokens.weight'")):
        ts.params_from_torchscale(untied, config)
    config.num_decoder_layers = 2  # the checkpoint has 3
    with pytest.raises(
        ValueError, match=re.escape("'decoder.layers.2.self_attn.k_proj.weight' has no place")
    ):
        ts.params_from_torchscale(state, config)


def test_a_model_trained_here_exports_with_torchscales_positions():
    """Learned positions read from row p (offset 0) are written at torchscale's row p + 2;
    the re-imported model (offset 2) computes the same logits. Sinusoids from position 0
    have no torchscale form and are refused."""
    config = tiny_config("decoder", "pre_ln", positions="learned", max_len=12)
    model = architectures.build(config)
    tokens = np.asarray([[5, 9, 12, 7, 0, 0]], np.int32)
    params = init_params(model, "decoder", tokens)
    state = runs.reoffset_positions(ts.params_to_torchscale(params, config), config)
    assert (
        state["embed_positions.weight"].shape == (14, 32)
        and not state["embed_positions.weight"][:2].any()
    )
    back = ts.model_config_from_torchscale(ts.torchscale_args_from_config(config))
    assert back.position_offset == 2 and back.max_len == 12
    want = logits(config, params, {"tokens": tokens})
    got = logits(back, ts.params_from_torchscale(state, back), {"tokens": tokens})
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=1e-5, atol=1e-5)
    config.positions = "sinusoidal"
    with pytest.raises(ValueError, match=r"model\.position_offset=0 with sinusoidal positions"):
        ts.torchscale_args_from_config(config)


def run_cli(*argv: str) -> None:
    flags.FLAGS.unparse_flags()
    args = flags.FLAGS(["torchscale", *argv])
    cli.main(args)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A workdir imported from the encdec deepnorm fixture by the command line."""
    workdir = str(tmp_path_factory.mktemp("imported") / "run")
    source = os.path.join(FIXTURES, "encdec_deepnorm.npz")
    run_cli("import", f"--checkpoint={source}", f"--workdir={workdir}")
    return workdir


def test_import_writes_a_run_the_tools_read_and_export_gives_it_back(imported, tmp_path):
    state, _, arrays = load_case("encdec", "deepnorm")
    run = run_loading.load_run(imported)
    assert run.description == "checkpoint 0" and run.config.model.position_offset == 2
    assert max_error(run.config.model, run.params, arrays) <= TOLERANCE
    out = str(tmp_path / "back.npz")
    run_cli("export", f"--workdir={imported}", f"--out={out}")
    back = files.read(out)
    assert set(back.state_dict) == set(state)
    assert all(back.state_dict[k].tobytes() == state[k].tobytes() for k in state)
    # torchscale has no remat: the imported run keeps the training default (auto), which a
    # loaded run reads as no remat; the exported config is a model built directly (full)
    remat = ("remat_policy", "scan_group_size")
    exported = ts.model_config_from_torchscale(back.args).to_dict()
    loaded = run.config.to_dict()["model"]
    assert {k: v for k, v in exported.items() if k not in remat} == {
        k: v for k, v in loaded.items() if k not in remat
    }
    with pytest.raises(SystemExit):
        run_cli("import", f"--checkpoint={out}", f"--workdir={imported}")


def test_fine_tuning_resumes_from_the_imported_parameters(imported, tmp_path):
    """train.py's resume starts from checkpoint 0's parameters: one update at a learning rate
    of 1e-9 leaves them within 1e-6 of the import (a fresh init would be ~0.1 away)."""
    workdir = str(tmp_path / "finetune")
    shutil.copytree(imported, workdir)
    config = runs.load_train_config(RunDir(workdir).finetune_config)
    config.total_steps, config.log_every, config.eval_every, config.checkpoint_every = 1, 1, 0, 1
    config.schedule.warmup_init_lr, config.optimizer.learning_rate = 1e-9, 1e-9
    config.decode.eval_sentences = 0
    config.data.batch_size = 4
    result = train.run(config, workdir)
    assert np.isfinite(result["train_loss"])
    tuned = run_loading.load_run(workdir)
    assert tuned.description == "checkpoint 1"
    start = run_loading.load_run(imported).params
    for a, b in zip(jax.tree.leaves(tuned.params), jax.tree.leaves(start), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_bad_command_lines_write_nothing(tmp_path, capsys):
    workdir = tmp_path / "run"
    source = os.path.join(FIXTURES, "decoder_subln.npz")
    cases = [
        (["import", f"--checkpoint={tmp_path / 'missing.pt'}"], "missing.pt does not exist"),
        (
            ["import", f"--checkpoint={source}", f"--spm={tmp_path / 'x.model'}"],
            "x.model does not exist",
        ),
        (["import", f"--workdir={workdir}"], "import needs --checkpoint"),
        (
            ["export", f"--workdir={tmp_path / 'none'}", f"--out={tmp_path / 'a.pt'}"],
            "none does not exist",
        ),
    ]
    for argv, message in cases:
        if "--workdir" not in " ".join(argv):
            argv = [*argv, f"--workdir={workdir}"]
        with pytest.raises(SystemExit) as exit_:
            run_cli(*argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 1 and err.startswith("error: ") and message in err, err
        assert len(err.splitlines()) == 1
    assert not workdir.exists() and os.listdir(tmp_path) == []


def test_unsupported_checkpoint_writes_nothing(tmp_path, capsys):
    state, args, _ = load_case("decoder", "pre_ln")
    bad = tmp_path / "multiway.npz"
    files.save(str(bad), state, {**args, "multiway": True})
    with pytest.raises(SystemExit):
        run_cli("import", f"--checkpoint={bad}", f"--workdir={tmp_path / 'run'}")
    assert "multiway=True is not supported" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["multiway.npz"]


def test_pt_files_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    state, args, _ = load_case("decoder", "deepnorm")
    fairseq = {"model": {f"decoder.{k}": torch.from_numpy(v) for k, v in state.items()}}
    fairseq["model"]["decoder.version"] = torch.tensor([3.0])
    import argparse

    torch.save({**fairseq, "args": argparse.Namespace(**args)}, tmp_path / "fairseq.pt")
    read = files.read(str(tmp_path / "fairseq.pt"))
    assert read.prefix == "decoder." and read.ignored == ("decoder.version",)
    assert all(np.array_equal(read.state_dict[k], v) for k, v in state.items())
    files.save(str(tmp_path / "out.pt"), read.state_dict, read.args)
    again = files.read(str(tmp_path / "out.pt"))
    assert all(np.array_equal(again.state_dict[k], v) for k, v in state.items())

"""Target names: Cloud TPU accelerator types and topologies, GPU nodes, simulated CPUs."""

import pytest

from deepnet_jax.scale import targets


@pytest.mark.parametrize(
    "name, topology, devices, hosts",
    [
        ("v4-8", "v4:2x2x1", 4, 1),
        ("v4-128", "v4:4x4x4", 64, 16),
        ("v5p-8", "v5p:2x2x1", 4, 1),
        ("v5p-64", "v5p:2x4x4", 32, 8),
        ("v5e-1", "v5e:1x1", 1, 1),
        ("v5e-4", "v5e:2x2", 4, 1),
        ("v5litepod-8", "v5e:2x4", 8, 1),
        ("v5e-256", "v5e:16x16", 256, 64),
        ("v6e-8", "v6e:2x4", 8, 1),
        ("v6e-16", "v6e:4x4", 16, 4),
        ("v5p:4x4x4", "v5p:4x4x4", 64, 16),
        ("h100-8", "1x1x8", 8, 1),
        ("h100-64", "1x8x8", 64, 8),
        ("a100-8", "1x1x8", 8, 1),
        ("b200-4", "1x1x4", 4, 1),
        ("cpu:8", "cpu:8", 8, 1),
    ],
)
def test_names_give_the_cloud_shapes(name, topology, devices, hosts):
    target = targets.parse(name)
    assert (target.topology, target.num_devices, target.num_hosts) == (topology, devices, hosts)
    assert target.name == name


@pytest.mark.parametrize("name", ["v5p-6", "v4-4", "v5e-3", "h100-12", "tpu-8", "cpu:0", "v7:2x2"])
def test_unknown_targets_get_one_line_listing_the_known(name):
    with pytest.raises(ValueError) as error:
        targets.parse(name)
    message = str(error.value)
    assert "\n" not in message and name in message
    assert "v5p-{8,16" in message and "h100-N" in message and "cpu:N" in message


def test_chip_figures_are_positive_and_megacore_counts_are_chips():
    for chip in [*targets.TPU_CHIPS.values(), *targets.GPU_CHIPS.values()]:
        assert chip.memory_bytes > 0 and chip.peak_flops > 0
        assert chip.memory_bytes_per_s > 0 and chip.link_bytes_per_s > 0
    # v5p-8 names 8 TensorCores: 4 megacore chips, one JAX device each
    assert targets.parse("v5p-8").num_devices == 4

"""The jax entry points that are not jax's stable public API, in one place, for every jax the
package supports (0.10.2 to 0.12.0.1, docs/install.md).

The rest of the package calls these functions, never ``jax._src`` nor
``jax.experimental.topologies`` (``tests/test_layout.py`` checks it), so a jax release that
moves one of them changes this module only. Each function says where the entry point lives in
each supported version; the suite's records on both ends of the range (docs/install.md, "Tested
sets") are what shows they hold.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax


def register_pjrt_plugins() -> None:
    """Discover and register jax's PJRT plugins (the ``jax_plugins`` namespace and entry points,
    then ``PJRT_NAMES_AND_LIBRARY_PATHS``) without starting a backend, so settings made later
    (``jax_platforms``, the CPU device count) still apply. jax does this itself on first
    backend use; calling it first lets the caller filter what plugins print.

    ``jax._src.xla_bridge._discover_and_register_pjrt_plugins`` in 0.10.2–0.12.0.1 (it has no
    public name; ``discover_pjrt_plugins`` beside it only imports the plugins)."""
    from jax._src import xla_bridge

    xla_bridge._discover_and_register_pjrt_plugins()


def cudnn_library_answers() -> bool:
    """Whether cuDNN's library gives jax its version on this host: the first thing tracing
    cuDNN's fused attention (``jax.nn.dot_product_attention(implementation="cudnn")``) asks.

    ``jax._src.cudnn.fused_attention_stablehlo.check_cudnn_version`` in 0.10.2–0.12.0.1,
    raising RuntimeError when the library is missing or too old."""
    from jax._src.cudnn import fused_attention_stablehlo

    try:
        fused_attention_stablehlo.check_cudnn_version()
    except RuntimeError:
        return False
    return True


def compile_only_devices(name: str, platform: str, **options: Any) -> list[jax.Device]:
    """Compile-only devices of an accelerator this host need not have, in topology order:
    ``platform`` "tpu" (libtpu; ``name`` a topology such as ``v5p:2x2x1``, ``options`` its
    chip configuration) or "cuda" (the CUDA plugin; ``name`` the device kind, ``options``
    ``target_config`` and ``topology``).

    ``jax.experimental.topologies.get_topology_desc(name, platform, **options).devices`` in
    0.10.2–0.12.0.1."""
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(name, platform, **options).devices)


def compilation_cache(enabled: bool) -> contextlib.AbstractContextManager:
    """A context in which jax's persistent compilation cache is on or off (a compile-only
    compiler has no client to load a cached executable with).

    ``jax._src.config.enable_compilation_cache`` (a context-manager state) in 0.10.2–0.12.0.1;
    the public ``jax.config.update`` sets it for the whole process only."""
    from jax._src import config

    return config.enable_compilation_cache(enabled)

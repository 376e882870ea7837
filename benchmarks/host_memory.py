"""Host-memory figures the CPU benchmarks print next to their step times.

XLA:CPU allocates a step's temporaries (activations, the scan's stacked per-layer residuals)
afresh on every execution. Blocks that glibc's ``malloc`` takes straight from the kernel
(``mmap``, and the per-thread arenas' heaps) are returned to it when freed, so the next step
touches them as new pages: one minor page fault per 4 KiB page, each a trap into the kernel and
a zeroed page. How many there are depends on the allocator settings the process started with
(``GLIBC_TUNABLES``, ``MALLOC_*``), which is why both are reported. See docs/benchmarks.md,
"Host memory: page faults per step".
"""

from __future__ import annotations

import os
import resource


def malloc_env() -> dict[str, str]:
    """The glibc allocator settings of this process's environment (``GLIBC_TUNABLES`` and
    ``MALLOC_*``; read by glibc at start-up, and inherited by child processes)."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k == "GLIBC_TUNABLES" or k.startswith("MALLOC_")
    }


def minor_page_faults() -> int:
    """This process's minor page faults so far (``getrusage``; all threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

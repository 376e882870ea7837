"""The host-memory figures the CPU benchmarks print: allocator settings and page faults."""

import mmap

from benchmarks import host_memory


def test_malloc_env_reports_only_glibc_allocator_settings(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    env = host_memory.malloc_env()
    assert env == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "MALLOC_ARENA_MAX": "1"}


def test_minor_page_faults_count_first_touches_of_fresh_pages():
    pages = 4096
    before = host_memory.minor_page_faults()
    with mmap.mmap(-1, pages * mmap.PAGESIZE) as block:  # anonymous: no page backed yet
        if hasattr(mmap, "MADV_NOHUGEPAGE"):  # 4 KiB pages even where THP is "always"
            block.madvise(mmap.MADV_NOHUGEPAGE)
        for i in range(pages):
            block[i * mmap.PAGESIZE] = 1  # the first touch of each page faults it in
        touched = host_memory.minor_page_faults() - before
        for i in range(pages):
            block[i * mmap.PAGESIZE] = 2  # touching them again faults nothing
        again = host_memory.minor_page_faults() - before - touched
    assert pages * 0.9 <= touched <= pages * 1.5, touched
    assert again < pages * 0.1, again

"""Host-to-device copies of the decode loop. Every list the host sends a step (tokens, positions, lengths, rows,
draft lengths) goes through `to_device`: on CUDA it is staged in pinned memory and copied without blocking the
host, where torch.tensor(list, device="cuda") makes a pageable copy that waits for the device. The step's one
device-to-host read is engine._to_host; tests/decoding/test_fastpath.py counts both."""

from __future__ import annotations

import functools

import torch


def to_device(data, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """data (a number or nested lists of them) as a tensor on device; on CUDA a non-blocking copy from pinned
    memory (torch's caching host allocator keeps the pinned block until the copy has run)."""
    host = torch.tensor(data, dtype=dtype, device="cpu")
    if torch.device(device).type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host


@functools.lru_cache(maxsize=1024)
def index(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A constant index [len(values)] (long) on device, copied once per batch shape: the cache rows of a step, each
    row's last position, the rows' draft lengths (read-only: its users never write it)."""
    return to_device(list(values), device)

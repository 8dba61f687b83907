"""Counter-based random numbers for the decode loop.

Each prompt owns a stream: a key (from its seed) and a count of the steps it has taken. A step's numbers are
u(key, count, lane) = hash(key, count, lane), mapped to (0, 1): lane DRAFT + j is the draft's draw at position j,
VERIFY + j the acceptance test's uniform there, RESIDUAL the correction (or bonus) draw. The numbers of every row
of a batch come from one batched computation on the device, with no generator state, so a row draws the same
numbers in any batch, at any position in it, and on any device. A categorical draw is the inverse of the
distribution's cumulative sum (float64) at one uniform.

The hash is a 32-bit integer mixer (Wellons' "lowbias32" construction; multipliers below 2^31, so that every
product fits in int64), applied in two independent chains whose 26 high bits each make one float64 of 52 random
bits: u = (a * 2^26 + b + 1/2) / 2^52, never 0 or 1. tests/decoding/test_rng.py checks uniformity, independence across
counts, lanes and seeds, and the draws' distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diversed.decoding.transfer import index, to_device

MASK = 0xFFFF_FFFF
DRAFT, VERIFY, RESIDUAL = 0, 1 << 10, 1 << 11  # lanes of a step: draft position j, test position j, correction
_M1, _M2 = 0x21F0AAAD, 0x735A2D97  # the mixer's multipliers (both < 2^31)
_C1, _C2, _C3 = 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35  # chain constants


def mix(x):
    """A bijective 32-bit mixer on ints in [0, 2^32) (Python ints or int64 tensors)."""
    x = x ^ (x >> 16)
    x = (x * _M1) & MASK
    x = x ^ (x >> 15)
    x = (x * _M2) & MASK
    return x ^ (x >> 15)


def key(seed: int) -> tuple[int, int]:
    """A stream's key: two 32-bit words from a seed in [0, 2^64)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ValueError(f"a stream's seed must be an integer in [0, 2^64), got {seed!r}")
    a = mix(seed & MASK)
    return a, mix(((seed >> 32) & MASK) ^ a ^ _C1)


def stream_seed(seed: int, i: int) -> int:
    """The seed of item i's stream (a prompt, a rollout) in a job seeded by seed: distinct for every (seed, i)."""
    if not 0 <= seed < 1 << 32 or not 0 <= i < 1 << 32:
        raise ValueError(f"a job's seed and an item's index must lie in [0, 2^32), got {seed} and {i}")
    return seed << 32 | i


def step_lanes(K: int) -> tuple[int, ...]:
    """Every lane a speculative step of draft length K reads: the drafts', the tests' and the correction's."""
    return (*range(DRAFT, DRAFT + K), *range(VERIFY, VERIFY + K + 1), RESIDUAL)


@dataclass
class Draws:
    """One step's random numbers for R rows: row r's at lane l is u(key[r], count[r], l). With K given, the first
    number asked for computes every lane of the step (step_lanes(K)) in one batched hash, and the step's later
    draws read that table: one hash computation a step instead of one per draw (the same numbers)."""

    keys: torch.Tensor  # [R, 2] long
    count: torch.Tensor  # [R] long, < 2^32
    K: int | None = None
    table: torch.Tensor | None = None  # [R, len(step_lanes(K))] float64, once computed

    def hash(self, lanes: torch.Tensor) -> torch.Tensor:
        """lanes [L] (long, on the device) -> [R, L] float64 in (0, 1)."""
        ka, kb = self.keys[:, :1], self.keys[:, 1:]  # [R, 1]
        c, lanes = self.count[:, None], lanes[None]  # [R, 1], [1, L]
        a = mix(mix(c ^ ka) ^ kb ^ lanes)  # [R, L]
        b = mix(mix(c ^ kb ^ _C2) ^ ka ^ lanes ^ _C3)
        return ((a >> 6) * (1 << 26) + (b >> 6)).double().add_(0.5).mul_(2.0 ** -52)

    def uniform(self, lane: int, width: int = 1) -> torch.Tensor:
        """[R, width] float64 in (0, 1): lanes lane .. lane + width - 1 of each row."""
        if self.K is not None:
            lanes = step_lanes(self.K)
            if lane in lanes and lane + width - 1 in lanes:
                if self.table is None:
                    self.table = self.hash(index(lanes, self.count.device))
                at = lanes.index(lane)
                return self.table[:, at:at + width]
        return self.hash(torch.arange(lane, lane + width, device=self.count.device))

    def categorical(self, probs: torch.Tensor, lane: int) -> torch.Tensor:
        """probs [R, V] (non-negative, any positive total) -> one token id per row [R] (long), drawn at lane."""
        cdf = probs.double().cumsum(-1)  # [R, V]
        at = self.uniform(lane) * cdf[:, -1:]  # [R, 1]
        return torch.searchsorted(cdf, at)[:, 0].clamp_(max=probs.shape[-1] - 1)

    def at(self, r: int) -> Draws:
        """Row r's numbers alone (a batch of one)."""
        return Draws(self.keys[r:r + 1], self.count[r:r + 1], self.K,
                     None if self.table is None else self.table[r:r + 1])


class Streams:
    """The streams of a batch's B cache rows, on the device: each slot's key and step count, so that a step costs
    no copy from the host (the slots' index is cached per batch shape)."""

    def __init__(self, rows: int, device: torch.device):
        self.keys = torch.zeros(rows, 2, dtype=torch.long, device=device)  # [B, 2]
        self.count = torch.zeros(rows, dtype=torch.long, device=device)  # [B]

    def start(self, slots: list[int], seeds: list[int]) -> None:
        """New streams (count 0) in slots, one per seed."""
        at = to_device(slots, self.keys.device)
        self.keys[at] = to_device([key(s) for s in seeds], self.keys.device)
        self.count[at] = 0

    def take(self, at: torch.Tensor, K: int | None = None) -> Draws:
        """The step's numbers of the rows at slots `at` [R] (long, on the device), for a step of draft length K
        (Draws); their counts advance by one."""
        draws = Draws(self.keys[at], self.count[at], K)
        self.count.index_add_(0, at, torch.ones_like(at))
        return draws


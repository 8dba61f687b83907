"""Soak: a 2,000-token decode and a 200-prompt run on the tiny pair, without memory growth. Not in the default suite
(about a minute on 2 cores); `pytest -m soak -s` runs it and prints RSS at 20, 100 and 200 prompts."""

from __future__ import annotations

import resource
import time

import pytest
from helpers import tiny_llama

from diversed.decoding.engine import speculative_generate
from diversed.decoding.models import truncated_draft
from diversed.decoding.settings import Decoding, Sampling

pytestmark = [pytest.mark.soak, pytest.mark.slow]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_long_decode_and_many_prompts_without_memory_growth(capsys):
    target = tiny_llama(0, ctx=4096)
    draft = truncated_draft(target, 1)
    t0 = time.perf_counter()
    long = speculative_generate(target, draft, [1, 5, 7],
                                Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=2000,
                                         sampling=Sampling(1.0), eos_token_id=[]),
                                         seed=0)
    assert len(long.tokens) == 2000
    long_s = time.perf_counter() - t0
    marks = {}
    base = rss_mb()
    for i in range(200):
        out = speculative_generate(target, draft, [1, 10 + i % 50, 3],
                                   Decoding(verifier="fixed", weight=0.5, K=4, max_new_tokens=64,
                                            sampling=Sampling(1.0), eos_token_id=[]),
                                            seed=i)
        assert len(out.tokens) == 64
        if i + 1 in (20, 100, 200):
            marks[i + 1] = (rss_mb(), peak_mb())
    with capsys.disabled():
        print(f"\n2000-token decode: {long_s:.1f} s; RSS before the 200 prompts {base:.0f} MB")
        for n, (rss, peak) in marks.items():
            print(f"after {n:3d} prompts: RSS {rss:.0f} MB, peak RSS {peak:.0f} MB")
    assert marks[200][0] - marks[20][0] < 50  # no growth beyond allocator noise

"""The decode loop's counter-based random numbers (diversed.decoding.rng): uniform, independent across counts,
lanes and seeds, categorical draws with the right distribution, the same numbers for a row in any batch, and no
per-row draw left in the decode loop."""

from __future__ import annotations

import pytest
import torch
from helpers import Stream
from scipy import stats

from diversed.decoding import rng
from diversed.decoding.engine import Networks, generate
from diversed.decoding.rng import Draws, Streams, key, stream_seed
from diversed.decoding.settings import Decoding, Sampling

PROMPTS = [[1, 5, 7, 9], [1, 30, 31], [1, 80, 3, 3, 3, 40, 12]]


def grid(seeds: int, counts: int, lanes: int) -> torch.Tensor:
    """u [counts, seeds, lanes] of streams 0 .. seeds - 1."""
    keys = torch.tensor([key(s) for s in range(seeds)])
    return torch.stack([Draws(keys, torch.full((seeds,), c)).uniform(0, lanes) for c in range(counts)])


def pairs_uniform(a: torch.Tensor, b: torch.Tensor, bins: int = 16) -> float:
    """Chi-square p-value that (a, b) is uniform on the unit square (bins x bins cells)."""
    cells = (a * bins).long() * bins + (b * bins).long()
    return stats.chisquare(torch.bincount(cells.flatten(), minlength=bins * bins).numpy()).pvalue


def test_uniforms_are_uniform_and_independent_across_counts_lanes_and_seeds():
    u = grid(400, 100, 8).double()  # 320,000 numbers
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert stats.kstest(u.flatten().numpy(), "uniform").pvalue > 1e-3
    assert pairs_uniform(u[:-1], u[1:]) > 1e-3  # consecutive counts
    assert pairs_uniform(u[..., :-1], u[..., 1:]) > 1e-3  # neighbouring lanes
    assert pairs_uniform(u[:, :-1], u[:, 1:]) > 1e-3  # neighbouring seeds
    # the test has power: numbers that repeat with a shift fail it
    assert pairs_uniform(u[:-1], (u[:-1] + 0.01) % 1) < 1e-6


def test_categorical_draws_follow_the_distribution_and_never_draw_a_zero():
    probs = torch.tensor([0.1, 0.0, 0.55, 0.05, 0.3])
    keys = torch.tensor([key(s) for s in range(500)])
    tokens = torch.cat([Draws(keys, torch.full((500,), c)).categorical(probs.expand(500, 5) * 3.0, 7)
                        for c in range(40)])  # unnormalised weights: the total is 3
    counts = torch.bincount(tokens, minlength=5)
    assert counts[1] == 0
    keep = probs > 0
    assert stats.chisquare(counts[keep].numpy(), probs[keep].numpy() * len(tokens)).pvalue > 1e-3
    assert stats.chisquare(counts[keep].numpy(), [len(tokens) / 4] * 4).pvalue < 1e-6  # power


def test_a_row_draws_the_same_numbers_in_any_batch():
    keys = torch.tensor([key(stream_seed(3, i)) for i in range(6)])
    count = torch.tensor([0, 5, 2, 9, 1, 4])
    probs = torch.rand(6, 50, generator=torch.Generator().manual_seed(0))
    batch = Draws(keys, count)
    for r in range(6):
        one = batch.at(r)
        assert torch.equal(one.uniform(rng.VERIFY, 4), batch.uniform(rng.VERIFY, 4)[r:r + 1])
        assert torch.equal(one.categorical(probs[r:r + 1], rng.RESIDUAL),
                           batch.categorical(probs, rng.RESIDUAL)[r:r + 1])


def test_streams_advance_per_slot_and_restart_on_admission():
    streams = Streams(3, torch.device("cpu"))
    streams.start([0, 1, 2], [10, 11, 12])
    first = streams.take(torch.tensor([0, 2])).uniform(0)
    second = streams.take(torch.tensor([0, 2])).uniform(0)
    assert streams.count.tolist() == [2, 0, 2] and not torch.equal(first, second)
    alone = Stream(12)
    assert torch.equal(alone.next().uniform(0), first[1:]) and torch.equal(alone.next().uniform(0), second[1:])
    streams.start([2], [12])
    assert streams.count.tolist() == [2, 0, 0] and torch.equal(streams.take(torch.tensor([2])).uniform(0), first[1:])


@pytest.mark.parametrize("seed", [-1, 1 << 64, 1.5, True])
def test_a_bad_seed_is_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        key(seed)
    with pytest.raises(ValueError, match="2\\^32"):
        stream_seed(1 << 32, 0)


def test_the_decode_loop_draws_no_random_number_row_by_row(target, draft, monkeypatch):
    """Sampling, verification and the correction draw every row's numbers in one batched computation: torch's
    per-call samplers are never reached while a batch decodes."""
    def refuse(*a, **k):
        raise AssertionError("a per-row draw in the decode loop")

    for name in ("multinomial", "rand", "bernoulli"):
        monkeypatch.setattr(torch, name, refuse)
    for verifier, kw in (("fixed", {"weight": 0.5}), ("lenient", {"knob": 0.5}), ("autoregressive", {})):
        decoding = Decoding(verifier, K=3, max_new_tokens=12, sampling=Sampling(1.0), **kw)
        out = generate(Networks(target, draft), PROMPTS, decoding, batch_size=3)
        assert all(len(g.tokens) == 12 for g in out)


def test_a_sampled_step_hashes_its_numbers_once(target, draft, monkeypatch):
    """#49: every number a sampled speculative step reads (K drafts, K + 1 tests, the correction) comes from one
    batched hash a step, not one per draw (~420 small kernels a step on a GPU before), and they are the same
    numbers as drawn one lane at a time."""
    calls = []
    hash_ = Draws.hash
    monkeypatch.setattr(Draws, "hash", lambda self, lanes: calls.append(lanes.numel()) or hash_(self, lanes))
    d = Decoding("strict", K=4, max_new_tokens=24, sampling=Sampling(temperature=1.0), eos_token_id=())
    (gen,) = generate(Networks(target, draft), [[1, 5, 9, 13]], d, seeds=[7])
    assert len(calls) == len(gen.drafted) and set(calls) == {len(rng.step_lanes(4))}
    keys, count = torch.tensor([key(3), key(4)]), torch.tensor([5, 9])
    table = Draws(keys, count, K=4)
    for lane, width in ((rng.DRAFT, 1), (rng.DRAFT + 3, 1), (rng.VERIFY, 5), (rng.RESIDUAL, 1)):
        assert torch.equal(table.uniform(lane, width), Draws(keys, count).uniform(lane, width))

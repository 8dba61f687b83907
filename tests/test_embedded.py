"""End-to-end on the embedded SmolLM2 pair (needs `diversed prepare-models`; skipped without it)."""

from __future__ import annotations

import pytest

from diversed.decoding.models import draft_vocabulary, embedded_paths

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not all((p / "config.json").is_file() for p in embedded_paths()),
                       reason="embedded pair not built: run `diversed prepare-models`"),
]


@pytest.fixture(scope="module")
def pair():
    from diversed.decoding.models import load_pair

    return load_pair("embedded", "embedded")


def test_embedded_pair_shapes(pair):
    assert pair.target.config.num_hidden_layers == 30 and pair.draft.config.num_hidden_layers == 2
    assert len(draft_vocabulary(pair.draft)) == 4096
    assert pair.target.config.hidden_size == 576 and pair.vocab_size is None
    assert sum(p.numel() for p in pair.target.parameters()) == pytest.approx(134.5e6, rel=0.01)


def test_strict_greedy_is_target_greedy_on_embedded_pair(pair):
    from diversed.bench import hf_generate, no_eos
    from diversed.decoding.engine import Sampling, autoregressive_generate, speculative_generate
    from diversed.decoding.models import encode_prompt

    for text in ["What is 12 + 7?", "Write a haiku about the sea."]:
        ids = encode_prompt(pair.tokenizer, text)
        with no_eos(pair.target):
            ref = hf_generate(pair.target, ids, max_new_tokens=24)
        ours = autoregressive_generate(pair.target, ids, max_new_tokens=24, sampling=Sampling(0), eos_token_id=[])
        assert ours.tokens == ref
        out = speculative_generate(pair.target, pair.draft, ids, verifier="strict", K=5, max_new_tokens=24,
                                   sampling=Sampling(0), eos_token_id=[])
        assert out.tokens == ref

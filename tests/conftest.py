"""The tests' fixtures (session-scoped where building is slow); the helpers they use are in helpers.py."""

from __future__ import annotations

import os

import pytest
from helpers import tiny_llama

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of several workers, one core each: torch takes one thread
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def draft(target):
    from diversed.decoding.models import truncated_draft

    return truncated_draft(target, 1)


@pytest.fixture(scope="session")
def other_draft():
    return tiny_llama(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random target + 1-layer draft saved with a character tokenizer (what the CLI loads)."""
    from diversed.decoding.models import prepare_tiny

    root = tmp_path_factory.mktemp("models")
    prepare_tiny(root)
    return root

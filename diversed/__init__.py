"""diversed: relaxed speculative decoding (DIVERSED) — engine, verifiers, training, evaluation."""

__version__ = "0.1.0"

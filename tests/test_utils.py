"""Shared helpers: benchmark results are recorded section by section with their provenance."""

from __future__ import annotations

from diversed.utils import record_result


def test_record_result_rewrites_only_its_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    record_result("Bench", "| a |\n|---|\n| 1 |", "diversed bench", path)
    record_result("Draft depth", "depth table", "python benchmarks/draft_layers.py", path)
    record_result("Bench", "# Bench title\n\n| a |\n|---|\n| 2 |", "diversed bench -K 3", path)
    text = path.read_text()
    assert "\n#### Bench title\n" in text and "\n# Bench title" not in text
    assert text.count("\n## Bench\n") == 1 and "| 2 |" in text and "| 1 |" not in text
    assert text.index("## Bench") < text.index("## Draft depth") and "depth table" in text
    header = text.split("## Bench\n\n")[1].splitlines()[0]
    assert "`diversed bench -K 3`" in header and "commit" in header and "torch" in header and "threads" in header

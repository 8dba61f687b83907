"""The files generated from the experiment's declarations, committed so that editors and readers find them:
diversed/config.schema.yaml (the JSON schema of a workflow config) and docs/CONFIG.md (its key table).

    python -m diversed.experiment.generated          # rewrite both
    python -m diversed.experiment.generated --check  # exit 1 naming each stale file
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from diversed.experiment.config import Experiment
from diversed.experiment.declared import rows, schema

ROOT = Path(__file__).resolve().parents[2]
HEADER = "Generated from diversed/experiment/config.py by `python -m diversed.experiment.generated`; do not edit."


def schema_text() -> str:
    doc = {"$schema": "https://json-schema.org/draft/2020-12/schema",
           "description": "Configuration of the diversed reproduction workflow. " + " ".join(
               Experiment.__doc__.split())} | schema(Experiment)
    return f"# {HEADER}\n" + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def table_text() -> str:
    lines = ["# Configuration keys", "", f"<!-- {HEADER} -->", "",
             "Every key of a workflow config (`config/*.yaml`), its type and range, its default and what it does. "
             "`diversed.experiment.plan` parses a config through these declarations; an unknown key, a value of the "
             "wrong type or out of range, NaN or inf is refused naming the key's path.", "",
             "| key | accepts | default | meaning |", "|---|---|---|---|"]
    for key, accepts, default, text in rows(Experiment):
        shown = default if default in ("", "required") else f"`{default}`"
        lines.append(f"| `{key}` | {accepts} | {shown} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


FILES = {"diversed/config.schema.yaml": schema_text, "docs/CONFIG.md": table_text}


def stale(root: Path = ROOT) -> list[str]:
    """The generated files whose committed text differs from what the declarations generate."""
    return [name for name, make in FILES.items()
            if not (root / name).exists() or (root / name).read_text() != make()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if names := stale():
            print(f"stale: {', '.join(names)} (run python -m diversed.experiment.generated)", file=sys.stderr)
            return 1
        return 0
    for name, make in FILES.items():
        (ROOT / name).write_text(make())
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Weights & Biases logging that can never fail a run.

Mode: WANDB_MODE when set (tests set `disabled`); else `online` when an API key is configured,
else `offline` (sync later with `wandb sync logs/wandb/offline-run-*`). W&B's files go under WANDB_DIR, by default
`logs/` (so under logs/wandb/, beside the workflow's logs). Any error inside wandb is reported once and logging
continues as a no-op: nothing may fail for lack of a key or a network.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

PROJECT = "diversed"
LOG_DIR = "logs"  # W&B's folder's parent unless WANDB_DIR says otherwise


def wandb_mode() -> str:
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path.home() / ".netrc"
    has_login = netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    return "online" if os.environ.get("WANDB_API_KEY") or has_login else "offline"


class Tracker:
    """A W&B run, or a no-op when wandb is disabled or broken."""

    def __init__(self, *, name: str, group: str, job_type: str, config: dict[str, Any] | None = None,
                 dir: str | None = None, id: str | None = None):
        """id: a stable W&B run id (e.g. from a run's run_id), so that a later job adds to the same run."""
        self.run = None
        mode = wandb_mode()
        if mode == "disabled":
            return
        try:
            import wandb

            dir = dir or os.environ.get("WANDB_DIR") or LOG_DIR
            Path(dir).mkdir(parents=True, exist_ok=True)
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=name, group=group,
                                  job_type=job_type, config=config, mode=mode, dir=dir, reinit="finish_previous",
                                  id=id, resume="allow" if id else None,
                                  # the installed packages are in each manifest's provenance: not listed again
                                  settings=wandb.Settings(silent=True, console="off", x_save_requirements=False))
        except Exception as e:  # a tracker must never take a run down with it
            print(f"warning: W&B logging disabled ({type(e).__name__}: {e})", file=sys.stderr)
            self.run = None

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self._call(lambda: self.run.log(metrics, step=step))

    def frame(self, key: str, df) -> None:
        """Log a pandas DataFrame as a W&B table."""
        self.table(key, [str(c) for c in df.columns], df.astype(object).where(df.notna(), None).values.tolist())

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        def log_table():
            import wandb

            self.run.log({key: wandb.Table(columns=columns, data=rows)})

        self._call(log_table)

    def images(self, paths: list[str | Path]) -> None:
        """Log each image file under its stem."""

        def log_images():
            import wandb

            self.run.log({Path(p).stem: wandb.Image(str(p)) for p in paths})

        self._call(log_images)

    def summary(self, metrics: dict[str, Any]) -> None:
        self._call(lambda: self.run.summary.update(metrics))

    def finish(self) -> None:
        self._call(lambda: self.run.finish())
        self.run = None

    def _call(self, fn) -> None:
        if self.run is None:
            return
        try:
            fn()
        except Exception as e:
            print(f"warning: W&B logging failed ({type(e).__name__}: {e}); continuing without it", file=sys.stderr)
            self.run = None


def decode_tracker(run_id: str, task: str | None, verifier: str | None, labels: dict,
                   config: dict[str, Any] | None = None) -> Tracker:
    """The W&B run of a decoding run (id decode-{run_id}): its decode job creates it, scoring adds to it."""
    return Tracker(name=f"decode-{labels.get('task', task)}-{verifier}-{run_id}",
                   group=labels.get("experiment", "decode"), job_type="decode", config=config, id=f"decode-{run_id}")

"""Shared helpers: benchmark results are recorded section by section with their provenance."""

from __future__ import annotations

from diversed.runs.settings import Launch
from diversed.utils import record_result


def test_record_result_rewrites_only_its_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    record_result("Bench", "| a |\n|---|\n| 1 |", "diversed bench", path)
    record_result("Draft depth", "depth table", "python benchmarks/drafts.py", path)
    record_result("Bench", "# Bench title\n\n| a |\n|---|\n| 2 |", "diversed bench -K 3", path)
    text = path.read_text()
    assert "\n#### Bench title\n" in text and "\n# Bench title" not in text
    assert text.count("\n## Bench\n") == 1 and "| 2 |" in text and "| 1 |" not in text
    assert text.index("## Bench") < text.index("## Draft depth") and "depth table" in text
    header = text.split("## Bench\n\n")[1].splitlines()[0]
    assert "`diversed bench -K 3`" in header and "commit" in header and "torch" in header and "threads" in header


class FakeWandb:
    """What the tracker calls of wandb, recorded: one dict per wandb.init."""

    def __init__(self):
        self.runs: list[dict] = []

    def init(self, **kwargs):
        record = {"init": kwargs, "log": [], "summary": {}, "finished": False}
        self.runs.append(record)

        class Run:
            summary = record["summary"]

            def log(self, metrics, step=None):
                record["log"].append(metrics)

            def finish(self):
                record["finished"] = True

        return Run()

    @staticmethod
    def Settings(**kwargs):
        return kwargs

    @staticmethod
    def Table(columns, data):
        return {"columns": columns, "data": data}

    @staticmethod
    def Image(path):
        return {"image": path}


def test_scores_join_their_decode_run_and_the_report_logs_tables_and_figures(tiny_dir, tmp_path, monkeypatch):
    """W&B: a run's quality (scored in a later step) lands in the decode run's own entry (same id), and the report
    step logs Tables 1-3, the speed table and every figure to one report run."""
    import sys

    import pandas as pd

    from diversed.analysis.tables import write_all
    from diversed.report.compose import write_report
    from diversed.runs.evaluate import score_run
    from diversed.runs.run import RunConfig, execute, task_prompts

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_MODE", "offline")
    base = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), task="arith", n=2,
                     max_new_tokens=6, K=2)
    runs = []
    for verifier in ("autoregressive", "strict"):
        cfg = RunConfig(**{**base.__dict__, "verifier": verifier})
        runs.append(execute(cfg, task_prompts(cfg), tmp_path / "runs", launch=Launch(progress=False),
                            labels={"experiment": "smoke", "pair": "tiny", "method": verifier}))
        score_run(runs[-1])
    decode, scored = fake.runs[2], fake.runs[3]  # the strict run's decode, then its scoring
    assert decode["init"]["id"] == scored["init"]["id"] and scored["init"]["resume"] == "allow"
    assert scored["summary"]["quality"] == pd.read_json(runs[-1] / "scores.json", typ="series")["quality"]
    assert {"fidelity/target_logprob", "fidelity/target_argmax_agreement"} <= set(scored["summary"])
    assert all(r["finished"] for r in fake.runs)

    tables, figures = tmp_path / "tables", tmp_path / "figures"
    write_all(runs, tables)
    figures.mkdir()
    (figures / "quality_vs_time_T1.png").write_bytes(b"png")
    write_report(tables, figures, tmp_path / "REPORT.md")
    report = fake.runs[-1]
    assert report["init"]["job_type"] == "report" and report["init"]["group"] == "smoke"
    logged = {k: v for entry in report["log"] for k, v in entry.items()}
    assert {"table1", "table2", "table3", "speed", "quality_vs_time_T1"} <= set(logged)
    assert logged["speed"]["columns"][:2] == ["pair", "task"] and len(logged["speed"]["data"]) == 2

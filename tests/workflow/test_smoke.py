"""The smoke config (tiny random models built in place, every rule of the DAG) run once by Snakemake and shared by
every end-to-end check: every declared output exists and parses, a second run does nothing, a changed config
value reruns only its dependents, and a killed workflow and a failed decode job resume to identical runs. The tests
of this file run on one worker (pytest-xdist --dist loadfile), so the smoke run is made once."""

from __future__ import annotations

import filecmp
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import count_files, jobs, kill_when, snakemake, start, tracked_files, workflow_copy

from diversed.experiment.plan import load

pytestmark = pytest.mark.slow  # Snakemake in subprocesses
SMOKE = "config/smoke.yaml"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke config run once, uninterrupted, in a copy of the repository as a clone has it, W&B offline as a
    user without a key runs it."""
    wd = workflow_copy(tmp_path_factory.mktemp("smoke"), whole=True)
    snakemake("--cores", "2", "--configfile", SMOKE, cwd=wd, timeout=1200, wandb="offline")
    return wd


def test_the_main_job_writes_only_its_folders_and_the_linters_pass_after_it(smoke_run):
    """README's command 1 then command 2 on one tree: the workflow writes nothing outside results/, figures/, logs/
    and resources/ (W&B's offline runs under logs/wandb/; Snakemake's own .snakemake/), and the linters then pass
    on that tree (they failed when W&B's folder at the root made ruff take `wandb` for a first-party package)."""
    wd = smoke_run
    tracked = set(tracked_files())
    written = {p.relative_to(wd).parts[0] for p in wd.rglob("*") if p.is_file()
               and str(p.relative_to(wd)) not in tracked}
    assert written <= {"results", "figures", "logs", "resources", ".snakemake"}, written
    assert list((wd / "logs" / "wandb").glob("offline-run-*"))
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(wd)], cwd=wd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


WAIT = 60  # seconds the browser may take to show an element: the report renders by script, slowly on busy cores


def browser():
    """Debian's Chromium, headless, driven by Selenium through Debian's chromedriver (no driver download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.implicitly_wait(WAIT)  # find_element waits too
    return driver


def view(d, path: str, shown: str):
    """The element (XPath `shown`) that shows a listed file in the report's viewer, its eye clicked until it does: on
    busy cores a click can land before the page's script handles it, and the viewer never opened in 60 s."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def opened(drv):
        drv.implicitly_wait(0)
        found = drv.find_elements(By.XPATH, shown)
        drv.implicitly_wait(WAIT)
        if not found:
            drv.find_element(By.XPATH, f"//tr[td[text()='{path}']]//a[@iconname='eye']").click()
        return found[0] if found else False

    return WebDriverWait(d, WAIT, poll_frequency=2).until(opened)


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                    reason="needs chromium and chromedriver (the README's test command installs them)")
def test_snakemake_report_shows_every_figure_and_the_claims_in_a_browser(smoke_run):
    """`snakemake --report results/report.html` on the smoke run, opened in a headless browser: each category the
    plan flags (experiment.plan.shown: Claims, Figures, Tables) lists exactly its files, every figure decodes as an
    image in the browser, and the claims table renders with one row per claim and a verdict in each."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from diversed.experiment.plan import shown

    wd = smoke_run
    snakemake("--report", "results/report.html", "--configfile", SMOKE, cwd=wd, timeout=600)
    plan = load(wd / SMOKE)
    expected: dict[str, set[str]] = {}
    for rule in ("aggregate", "plot", "report"):
        for v in plan.job(rule, {}).outputs.values():
            for path in [v] if isinstance(v, str) else v:
                if how := shown(path):
                    expected.setdefault(how[0], set()).add(path)
    assert set(expected) == {"Claims", "Figures", "Tables"} and len(expected["Figures"]) == 10
    url, d = (wd / "results" / "report.html").as_uri(), browser()
    try:
        for category, paths in expected.items():
            d.get(url)
            d.find_element(By.XPATH, f"//span[text()='{category}']").click()
            rows = {r.find_element(By.TAG_NAME, "td").text: r
                    for r in d.find_elements(By.XPATH, "//tr[td/div/a[@iconname='eye']]")}
            assert set(rows) == paths, (category, sorted(rows))
        d.get(url)
        d.find_element(By.XPATH, "//span[text()='Figures']").click()
        for path in sorted(expected["Figures"]):  # each shown in the page, decoded by the browser
            name = path.rsplit("/", 1)[1]
            img = view(d, path, f"//img[contains(@src, 'filename={name};')]")
            size = WebDriverWait(d, WAIT).until(lambda drv, i=img: drv.execute_script(
                "const i = arguments[0]; return i.complete && i.naturalWidth ? [i.naturalWidth, i.naturalHeight] "
                ": null", i))
            assert min(size) > 100, (path, size)
        d.get(url)
        d.find_element(By.XPATH, "//span[text()='Claims']").click()
        d.switch_to.frame(view(d, "results/claims.html", "//iframe[contains(@src, 'filename=claims.html;')]"))
        header = [th.text for th in d.find_elements(By.CSS_SELECTOR, "table thead th")]
        verdicts = [tr.find_elements(By.TAG_NAME, "td")[header.index("verdict")].text
                    for tr in d.find_elements(By.CSS_SELECTOR, "table tbody tr")]
        written = (wd / "results" / "claims.html").read_text().split("<tbody>")[1].count("<tr")  # one per claim
        assert header[:3] == ["claim", "temperature", "verdict"] and len(verdicts) == written > 10
        assert set(verdicts) <= {"holds", "fails", "inconclusive", "not tested"}, set(verdicts)
    finally:
        d.quit()


def parses(path: Path) -> bool:
    """Every kind of file the workflow writes, opened by what reads it."""
    import matplotlib.image
    import pandas as pd
    from safetensors.torch import load_file

    from diversed.utils import read_jsonl

    readers = {".json": lambda p: json.loads(p.read_text()), ".jsonl": read_jsonl, ".csv": pd.read_csv,
               ".png": matplotlib.image.imread, ".pdf": lambda p: p.read_bytes().startswith(b"%PDF") or None,
               ".md": lambda p: p.read_text().strip() or None, ".tex": lambda p: p.read_text().strip() or None,
               ".txt": lambda p: p.read_text().strip() or None,
               ".html": lambda p: p.read_text()[:100].lower().startswith("<!doctype html") or None,
               ".safetensors": load_file, ".pt": lambda p: p.stat().st_size or None}
    return readers[path.suffix](path) is not None


def test_smoke_config_end_to_end(smoke_run):
    import pandas as pd

    wd = smoke_run
    plan = load(wd / "config" / "smoke.yaml")
    files = [p for d in ("results", "figures") for p in (wd / d).rglob("*") if p.is_file()]
    assert len(files) > 100
    for path in files:
        assert parses(path), path
    declared = [p for job in plan.jobs for v in job.outputs.values() for p in ([v] if isinstance(v, str) else v)]
    assert all((wd / p).exists() for p in declared)
    for name in ("table1", "table2", "table3", "transfer", "speed"):
        assert "tabular" in (wd / "results" / "tables" / f"{name}.tex").read_text()
    runs = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    # every quality and timing run of the plan, and its transfer runs (the lambda sweep's are in its table only)
    quality = [r for r in plan.runs if r.rule in ("decode", "decode_transfer")]
    timed = [r for r in plan.runs if r.rule == "time"]
    assert len(runs) == len(quality) + len(timed) == 62 and runs["timing"].sum() == 30
    assert set(runs["split"]) == {"eval"} and set(runs["method"]) == {r.method.split("@")[0] for r in quality}
    assert set(runs.loc[runs["timing"], "batch_size"]) == {1} and set(runs.loc[~runs["timing"], "batch_size"]) == {2}
    assert runs.loc[~runs["timing"], "tokens_per_s"].isna().all() and runs.loc[runs["timing"], "speedup"].notna().all()
    speed = pd.read_csv(wd / "results" / "tables" / "speed.csv")
    assert len(speed) == 30 and set(speed["prompts"]) == {2}  # the timed prompts only
    families = pd.read_csv(wd / "results" / "tables" / "families.csv")
    assert set(families["method"]) >= {"Static ensemble (fixed w)", "Speculative cascade", "Lenient SD", "AutoJudge",
                                       "DIVERSED"}
    own = runs["head_task"].isna()  # AutoJudge where answers are checked; on open only arith's judge, transferred
    assert set(runs.loc[own & (runs["method"] == "judge"), "task"]) == {"arith"}
    assert set(runs.loc[~own & (runs["method"] == "judge"), "head_task"]) == {"arith"}
    judge = json.loads((wd / "results" / "judges" / "tiny" / "arith" / "manifest.json").read_text())
    assert judge["task"] == "arith" and judge["fit"]["holdout"] == 0.2  # its classifier, from its mined labels
    # both learned verifiers trained on arith decode open (Table 3 and the transfer table); open has no references,
    # so no labels to take the judge's AUC on there
    assert "arith (AutoJudge)" in set(pd.read_csv(wd / "results" / "tables" / "table3.csv")["head trained on"])
    transfer = pd.read_csv(wd / "results" / "tables" / "transfer.csv").set_index("verifier")
    assert set(transfer.index) == {"DIVERSED", "AutoJudge"} and set(transfer["evaluated on"]) == {"open"}
    assert transfer.loc["AutoJudge", "AUC on evaluated task"] == "– (no labels mined on open)"
    held = judge["held_out"]["auc"]
    assert transfer.loc["AutoJudge", "AUC on trained task (held out)"] == (
        "– (held-out labels of one class or none)" if held is None else f"{held:.3f}")
    sweeps = pd.read_csv(wd / "results" / "tables" / "sweeps.csv")
    assert {"cascade", "lenient", "judge", "fixed", "strict", "dynamic", "autoregressive"} <= set(sweeps["verifier"])
    read = sweeps["K"] == 3  # the sweeps the runs read are timed at batch 1 (not the figure's K = 2 sweep)
    assert sweeps.loc[read, "speedup"].notna().all() and sweeps.loc[~read, "speedup"].isna().all()
    assert sweeps.loc[read & (sweeps["verifier"] == "autoregressive"), "speedup"].tolist() == pytest.approx([1.0] * 4)
    assert set(sweeps.loc[read, "timed_prompts"]) == {2}
    assert list(pd.read_csv(wd / "results" / "tables" / "table1.csv")["method"]) == [
        "SD", "SD with fine-tuned draft", "DIVERSED"]
    assert len(list((wd / "figures").glob("*.png"))) == 10  # 2, and 4 per T (acceptance vs TV and vs KL among them)
    lam = pd.read_csv(wd / "results" / "tables" / "lambda.csv")  # strict and the heads at lambda 0 and 1, on dev
    assert list(lam["lambda"]) == ["strict", "0 (fixed)", "1 (fixed)"]
    assert list(lam["chosen"].fillna("")).count("yes") == 1
    assert lam["quality"].notna().all() and set(lam["dev prompts"]) == {3}
    chosen = float(lam.loc[lam["chosen"] == "yes", "lambda"].item().split()[0])
    head = json.loads((wd / "results" / "heads" / "tiny" / "arith" / "manifest.json").read_text())
    assert head["config"]["acceptance_weight"] == chosen and head["chosen"]["split"] == "dev"
    report = (wd / "results" / "REPORT.md").read_text()
    assert "Table 1" in report and "## Claims" in report
    audit = (wd / "results" / "audit.txt").read_text()  # every timed run is a scored run, every counter adds up
    assert "FAIL" not in audit and "## Audit" in report
    cost = report.split("## Measured cost")[1].split("## Provenance")[0]  # every rule's jobs, from benchmark:
    assert all(f"| {rule} " in cost for rule in ("prepare_models", "decode", "time", "sweep", "train_head", "audit"))
    assert int(re.search(r"timed = scored: (\d+) of \1 passed", audit).group(1)) >= 30  # the eval timings at least
    knobs = pd.read_csv(wd / "results" / "tables" / "knobs.csv")  # each family's knob under each selection
    assert {"knob_certified", "knob_estimate", "eval check (certified)"} <= set(knobs.columns) and len(knobs)
    for name in ("static front", "Speculative cascade front", "Lenient SD front", "AutoJudge front"):  # each one's
        assert f"DIVERSED lies beyond the {name}" in report, name

    # nothing changed: nothing to do
    assert "Nothing to be done" in snakemake("-n", "--configfile", "config/smoke.yaml", cwd=wd).stdout
    # one config value changed (the sweep grid): only what depends on it reruns
    config = yaml.safe_load((wd / "config" / "smoke.yaml").read_text())
    config["sweep"]["weights"] = [0.25]
    (wd / "changed.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    counts = jobs(snakemake("-n", "--configfile", "changed.yaml", cwd=wd).stdout)
    decoding = ("time_sweep", "decode", "time")
    assert set(counts) == {"sweep", *decoding, "decode_transfer", "aggregate", "audit", "plot", "report", "all"}, counts
    # 2 tasks x 2 temperatures + the K-figure sweep (each keeps its finished points: see test_sweep), their
    # timing, the decode and timing jobs whose fixed run reads a re-chosen w, and the transfer whose judge reads
    # arith's re-chosen threshold
    assert counts["sweep"] == 5 and all(counts[r] == 4 for r in decoding) and counts["decode_transfer"] == 1


def test_a_killed_workflow_and_a_failed_decode_job_resume_to_identical_runs(smoke_run, tmp_path):
    """One decode job of the smoke config and everything it needs (the pair, the heads, the lambda sweep, the fine-
    tuned draft, its sweep), in a fresh copy of the workflow:
    1. Snakemake killed mid-sweep (SIGKILL to its process group) leaves the lock; unlock and rerun the same command;
    2. the decode job's own process killed after it kept two of its runs: the failed job wrote no manifest, its one
       output (regression: a failed decode job lost its finished runs, and its rerun decoded everything again);
       the rerun takes back exactly the kept runs (hard links under results/kept) and decodes the rest;
    3. the job's generations are byte-identical to the uninterrupted smoke run's (so also: the same config and seed
       give the same bytes, run twice)."""
    wd = workflow_copy(tmp_path)
    job = "results/jobs/decode/tiny/arith/T1.0-s0.json"  # one decode job's manifest: every method's run
    command = [sys.executable, "-m", "snakemake", job, "--cores", "2", "--configfile", "config/smoke.yaml"]
    sweep = wd / "results" / "sweeps" / "tiny" / "arith" / "T1.0-K3"
    at = random.Random(0).randint(1, 4)  # after a random number of the sweep's finished points
    kill_when(start(command, cwd=wd), lambda: count_files(sweep, "manifest.json") >= at, deadline=600)
    assert not (sweep / "choice.json").exists()
    snakemake("--unlock", "--configfile", "config/smoke.yaml", cwd=wd)  # the lock the SIGKILL left

    kept = wd / "results" / "kept"
    proc = start(command, cwd=wd)
    decode_log = wd / "logs" / "decode" / "tiny" / "arith" / "T1.0-s0.log"

    def two_runs_done():  # the decode job has kept 2 of its runs (earlier jobs keep none: only decode keeps)
        return decode_log.is_file() and kept.is_dir() and len([p for p in kept.iterdir()
                                                               if not p.name.startswith(".")]) >= 2

    t0 = time.time()
    while not two_runs_done():
        assert proc.poll() is None and time.time() - t0 < 600, "the decode job never kept two runs"
        time.sleep(0.05)
    found = subprocess.run(["pgrep", "-f", "diversed generate"], capture_output=True, text=True).stdout.split()
    decoders = [pid for pid in found if Path(f"/proc/{pid}/cwd").resolve() == wd.resolve()]  # this test's only
    assert decoders
    for pid in decoders:  # the job's process dies; Snakemake sees a failed job
        os.kill(int(pid), signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    assert not (wd / job).exists()
    finished = {p.name for p in kept.iterdir() if not p.name.startswith(".")}
    snakemake(job, "--cores", "2", "--configfile", "config/smoke.yaml", cwd=wd, timeout=600)
    log = decode_log.read_text()
    taken = set(re.findall(r"run (\w+): taken from", log))
    decoded = set(re.findall(r"decode (\w+) \(batch", log))
    assert taken == finished and len(taken) >= 2, (taken, finished)
    # the rest decoded, or copied: a fixed w the sweep left at 1, or a family kept at strict, is strict's run id;
    # nothing decoded where the kill came after the job's last distinct run (while scoring: seen on a fast machine)
    runs = list((wd / "results" / "runs" / "tiny" / "arith").glob("*/T1.0*-s0/manifest.json"))
    assert len(runs) == 8  # autoregressive, strict, finetuned, fixed, dynamic, cascade, lenient, judge
    assert not taken & decoded and len(taken) + len(decoded) + log.count(", copied") == len(runs), (decoded, taken)
    ref = smoke_run
    for rel in [Path("results/sweeps/tiny/arith/T1.0-K3/sweep.csv"), *sorted(
            p.relative_to(wd) for p in (wd / "results" / "runs" / "tiny" / "arith").rglob("T1.0*-s0/*.jsonl"))]:
        assert filecmp.cmp(ref / rel, wd / rel, shallow=False), rel

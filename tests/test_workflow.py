"""The Snakemake workflow: lint, schema validation, the paper DAG offline, and the smoke config end to end
(every declared output exists and parses; a second run does nothing; a config change reruns its dependents)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import ROOT, jobs, snakemake, workflow_copy

pytestmark = pytest.mark.slow  # Snakemake in subprocesses


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A fresh copy of the workflow: nothing the user's working tree has made or locked shows in a dry run."""
    return workflow_copy(tmp_path_factory.mktemp("workflow"))


def dag(wd: Path, *args: str) -> dict[str, int]:
    """Job counts of the full DAG in wd, whatever outputs it already holds."""
    return jobs(snakemake("-n", "--forceall", *args, cwd=wd).stdout)


def with_config(wd: Path, **change) -> str:
    """The smoke config with some top-level keys changed, written into wd; returns its path."""
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()) | change
    path = wd / "changed.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_lint_is_clean(tree):
    done = snakemake("--lint", cwd=tree)
    assert "Congratulations" in done.stdout + done.stderr


@pytest.mark.parametrize("configs,pairs", [(["config/paper.yaml"], 2),
                                           (["config/paper.yaml", "config/paper-gemma.yaml"], 3)])
def test_paper_config_builds_its_full_dag_offline(tree, configs, pairs):
    """The two pairs of the paper's tables; Gemma 3 layered on top (opt-in) adds a third with every other setting."""
    counts = dag(tree, "--configfile", *configs)
    # one decode job per pair x 4 tasks x 2 temperatures x 3 seeds (7 runs each), + pairs x 2 transfers x 3 seeds
    assert counts["decode"] == pairs * 4 * 2 * 3 and counts["decode_transfer"] == pairs * 2 * 3
    # sweeps: pairs x 4 tasks x 2 temperatures at K = 5, + pairs x 2 figure K
    assert counts["sweep"] == pairs * 4 * 2 + pairs * 2
    assert counts["time"] == pairs * 4 * 2  # every method timed in one job per pair, task and temperature
    assert counts["time_sweep"] == pairs * 4 * 2  # the points of each sweep the runs read, timed in one job
    # every task's lambda chosen on dev: a head per value, and one sweep_lambda, per pair and task
    assert "train_head" not in counts and counts["distill_draft"] == pairs * 4
    assert counts["train_head_lambda"] == pairs * 4 * 3 and counts["sweep_lambda"] == pairs * 4
    assert counts["aggregate"] == counts["plot"] == counts["report"] == 1


def test_default_config_dry_run(tree):
    counts = dag(tree)
    # (capitals, open) x (T = 0.1, 1) x 1 seed; the transfer runs at T = 1 only
    assert counts["prepare_models"] == 1 and counts["decode"] == 2 * 2 and counts["decode_transfer"] == 2
    assert counts["sweep"] == 4  # (capitals, open) x (T = 0.1, 1) at K = 5 (the figure's K = 5 among them)
    assert counts["time"] == 2 * 2 and counts["time_sweep"] == 2 * 2


def test_untimed_jobs_run_side_by_side_and_timed_jobs_alone(tree):
    """The default config on 2 cores: untimed jobs (quality decodes, sweeps, training) take job_threads = 1, so two
    run at once; a timed decode and the pair's build take both cores, so nothing runs beside them. Each job's
    torch threads are its Snakemake threads (OMP_NUM_THREADS in its shell command)."""
    done = snakemake("-n", "--forceall", "-p", "--cores", "2", cwd=tree)
    threads = {}
    for job in planned(done.stdout):
        threads.setdefault(job["rule"], set()).add(job["threads"])
    assert threads["time"] == threads["time_sweep"] == threads["prepare_models"] == {2}, threads
    for rule in ("decode", "decode_transfer", "sweep", "sweep_lambda", "train_head", "train_head_lambda",
                 "distill_draft"):
        assert threads[rule] == {1}, (rule, threads)
    shell = [line.removeprefix("Shell command: ") for line in done.stdout.splitlines() if "diversed generate" in line]
    timed = [s for s in shell if "logs/time/" in s or "logs/time_sweep/" in s]
    untimed = [s for s in shell if "logs/decode/" in s]
    assert timed and all(s.startswith("OMP_NUM_THREADS=2 ") for s in timed)
    assert untimed and all(s.startswith("OMP_NUM_THREADS=1 ") for s in untimed)


def test_dry_run_ignores_what_the_working_tree_already_made(tmp_path):
    """Regression: after `snakemake --cores all` the test's dry run in the working tree found nothing to prepare
    (KeyError: 'prepare_models')."""
    wd = workflow_copy(tmp_path)
    (wd / "resources" / "models").mkdir(parents=True)
    (wd / "resources" / "models" / "smollm2.json").write_text("{}")  # what a completed default run leaves
    counts = dag(wd)
    assert counts["prepare_models"] == 1 and counts["decode"] == 4


def test_target_only_runs_once_per_pair_task_temperature_seed(tree):
    """Regression: the target-only (and draft-only) run was decoded once per K."""
    done = snakemake("-n", "--forceall", "-p", "--configfile", with_config(tree, K=[2, 3], transfer=[]), cwd=tree)
    shell = [line for line in done.stdout.splitlines() if "diversed generate" in line and "logs/decode/" in line]
    runs = [run for line in shell for run in line.split(" --run ")[1:]]
    target_only = [run for run in runs if "verifier=autoregressive" in run]
    assert len(shell) == len(target_only) == 2 * 2  # 2 tasks x 2 temperatures x 1 seed: one job each, no K
    assert not any(" K=" in run for run in target_only) and not any(" -K " in line for line in shell)
    assert len(runs) - len(target_only) == 2 * 2 * 2 * 6  # tasks x temperatures x K x 6 speculative methods


def test_a_decode_job_times_every_method_of_its_setting(tree):
    """On a cluster, a run and its target-only baseline must be timed on the same GPU: one job decodes every
    method at one (pair, task, T, seed), the target-only run first, and scores them."""
    done = snakemake("-n", "--forceall", "-p", "--configfile", "config/smoke.yaml", cwd=tree)
    shell = [line for line in done.stdout.splitlines() if "diversed generate" in line and "logs/decode/" in line]
    assert len(shell) == 2 * 2
    for line in shell:
        methods = re.findall(r"label:method=(\w+)", line)
        assert methods == ["autoregressive", "strict", "finetuned", "fixed", "dynamic", "cascade", "lenient"], line
        assert line.count(" --run ") == 7 and " --score " in line
        chosen = [run for run in line.split(" --run ")[1:] if "method=cascade" in run or "method=lenient" in run]
        assert all("weight_file=results/sweeps/" in run for run in chosen), line  # their knob: the dev sweep's


def test_one_path_per_temperature(tree):
    """Regression: T = 1 and T = 1.0 made two sweeps (and T1-K3 vs T1.0-K3 paths) of the same setting."""
    done = snakemake("-n", "--forceall", "--configfile", with_config(tree, temperatures=[1], K=[2]), cwd=tree)
    assert "/T1-" not in done.stdout and "/T1.0-K2" in done.stdout
    assert jobs(done.stdout)["sweep"] == 2  # arith and open at (T = 1.0, K = 2): the figure's sweep too


def test_wildcards_do_not_swallow_each_other(tree):
    """Regression: T matched "0.1-K5", so a malformed path was planned as a run at temperature "0.1-K5"."""
    target = "results/runs/tiny/arith/strict/T0.1-K5-K3-s0/manifest.json"
    done = snakemake("-n", target, "--configfile", "config/smoke.yaml", cwd=tree, check=False)
    assert done.returncode != 0 and "rule decode:" not in done.stdout


def test_sweeps_decode_the_dev_split(tree):
    """The fixed w is chosen on n_dev prompts of the dev split, never on the eval prompts the tables report."""
    tasks = {name: {"n_eval": 3, "n_dev": 2, "n_train": 4, "max_new_tokens": 8} for name in ("arith", "open")}
    done = snakemake("-n", "--forceall", "-p", "--configfile", with_config(tree, tasks=tasks), cwd=tree)
    lines = done.stdout.splitlines()
    sweeps = [line for line in lines if "diversed sweep-weight" in line]
    timed_sweeps = [line for line in lines if "diversed generate" in line and "results/sweep_timing/" in line]
    decodes = [line for line in lines if "diversed generate" in line and line not in timed_sweeps]
    assert sweeps and all(" --split dev -n 2 " in line for line in sweeps)
    assert timed_sweeps and all(" --split dev -n 2 --limit " in line for line in timed_sweeps)  # the fronts' speed
    assert decodes and all(" -n 3 " in line and "split=" not in line and "--split" not in line
                           for line in decodes)  # eval, the default


@pytest.mark.parametrize(("change", "message"), [
    ({"temperatures": [-1.0]}, "minimum"),
    ({"methods": ["beam"]}, "beam"),
    ({"tasks": {"mmlu": {}}}, "mmlu"),
    ({"pairs": {"p": {"target": "x"}}}, "draft"),
    ({"seeds": "zero"}, "zero"),
    ({"lambda_sweep": {"tasks": ["arith"], "values": []}}, "lambda_sweep names tasks but no values"),
])
def test_bad_config_is_refused_before_any_job(tmp_path, change, message):
    wd = workflow_copy(tmp_path)
    done = snakemake("-n", "--configfile", with_config(wd, **change), cwd=wd, check=False)
    assert done.returncode != 0 and message in done.stdout + done.stderr


def parses(path: Path) -> bool:
    """Every kind of file the workflow writes, opened by what reads it."""
    import matplotlib.image
    import pandas as pd
    from safetensors.torch import load_file

    from diversed.utils import read_jsonl

    readers = {".json": lambda p: json.loads(p.read_text()), ".jsonl": read_jsonl, ".csv": pd.read_csv,
               ".png": matplotlib.image.imread, ".pdf": lambda p: p.read_bytes().startswith(b"%PDF") or None,
               ".md": lambda p: p.read_text().strip() or None, ".tex": lambda p: p.read_text().strip() or None,
               ".safetensors": load_file, ".pt": lambda p: p.stat().st_size or None}
    return readers[path.suffix](path) is not None


@pytest.mark.slow
def test_smoke_config_end_to_end(smoke_run):
    import pandas as pd

    wd = smoke_run
    files = [p for d in ("results", "figures") for p in (wd / d).rglob("*") if p.is_file()]
    assert len(files) > 100
    for path in files:
        assert parses(path), path
    for name in ("table1", "table2", "table3", "speed"):
        assert "tabular" in (wd / "results" / "tables" / f"{name}.tex").read_text()
    runs = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    # 2 tasks x 2 temperatures x 7 methods decoded for quality (batch 2) and again timed (batch 1, interleaved),
    # 1 transfer run (the lambda sweep decodes dev: its runs are in the lambda table only)
    assert len(runs) == 57 and runs["timing"].sum() == 28 and set(runs["split"]) == {"eval"}
    assert set(runs["method"]) == {"autoregressive", "strict", "finetuned", "fixed", "dynamic", "cascade", "lenient"}
    assert set(runs.loc[runs["timing"], "batch_size"]) == {1} and set(runs.loc[~runs["timing"], "batch_size"]) == {2}
    assert runs.loc[~runs["timing"], "tokens_per_s"].isna().all() and runs.loc[runs["timing"], "speedup"].notna().all()
    speed = pd.read_csv(wd / "results" / "tables" / "speed.csv")
    assert len(speed) == 28 and set(speed["prompts"]) == {2}  # the timed prompts only
    families = pd.read_csv(wd / "results" / "tables" / "families.csv")
    assert set(families["method"]) >= {"Static ensemble (fixed w)", "Speculative cascade", "Lenient SD", "DIVERSED"}
    sweeps = pd.read_csv(wd / "results" / "tables" / "sweeps.csv")
    assert {"cascade", "lenient", "fixed", "strict", "dynamic", "autoregressive"} <= set(sweeps["verifier"])
    read = sweeps["K"] == 3  # the sweeps the runs read are timed at batch 1 (not the figure's K = 2 sweep)
    assert sweeps.loc[read, "speedup"].notna().all() and sweeps.loc[~read, "speedup"].isna().all()
    assert sweeps.loc[read & (sweeps["verifier"] == "autoregressive"), "speedup"].tolist() == pytest.approx([1.0] * 4)
    assert set(sweeps.loc[read, "timed_prompts"]) == {2}
    assert list(pd.read_csv(wd / "results" / "tables" / "table1.csv")["method"]) == [
        "SD", "SD with fine-tuned draft", "DIVERSED"]
    assert len(list((wd / "figures").glob("*.png"))) == 6
    lam = pd.read_csv(wd / "results" / "tables" / "lambda.csv")  # strict and the heads at lambda 0 and 1, on dev
    assert list(lam["lambda"]) == ["strict", "0 (fixed)", "1 (fixed)"]
    assert list(lam["chosen"].fillna("")).count("yes") == 1
    assert lam["quality"].notna().all() and set(lam["dev prompts"]) == {3}
    chosen = float(lam.loc[lam["chosen"] == "yes", "lambda"].item().split()[0])
    head = json.loads((wd / "results" / "heads" / "tiny" / "arith" / "manifest.json").read_text())
    assert head["config"]["acceptance_weight"] == chosen and head["chosen"]["split"] == "dev"
    report = (wd / "results" / "REPORT.md").read_text()
    assert "Table 1" in report and "## Claims" in report
    for name in ("static front", "Speculative cascade front", "Lenient SD front"):  # DIVERSED beyond each family's
        assert f"DIVERSED lies beyond the {name}" in report, name

    # nothing changed: nothing to do
    assert "Nothing to be done" in snakemake("-n", "--configfile", "config/smoke.yaml", cwd=wd).stdout
    # one config value changed (the sweep grid): only what depends on it reruns
    config = yaml.safe_load((wd / "config" / "smoke.yaml").read_text())
    config["sweep"]["weights"] = [0.25]
    (wd / "config" / "smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    counts = jobs(snakemake("-n", "--configfile", "config/smoke.yaml", cwd=wd).stdout)
    assert set(counts) == {"sweep", "time_sweep", "decode", "time", "aggregate", "plot", "report", "all"}, counts
    # 2 tasks x 2 temperatures + the K-figure sweep (each keeps its finished points: see test_sweep), their
    # timing, and the decode and timing jobs whose fixed run reads a re-chosen w
    assert counts["sweep"] == 5 and counts["time_sweep"] == 4 and counts["decode"] == 4 and counts["time"] == 4


def planned(dry_run_output: str) -> list[dict]:
    """Each job of a dry run's log: its rule, and its input, wildcards, threads and resources as printed."""
    blocks = re.finditer(r"^\s*rule (\w+):\n((?:\s+\w+: .*\n)+)", dry_run_output, flags=re.M)
    out = []
    for b in blocks:
        fields = dict(re.findall(r"^\s+(\w+): (.*)$", b.group(2), flags=re.M))
        resources = dict(kv.split("=", 1) for kv in fields.get("resources", "").split(", ") if "=" in kv)
        out.append({"rule": b.group(1), "input": fields.get("input", "").split(", "),
                    "wildcards": dict(kv.split("=", 1) for kv in fields.get("wildcards", "").split(", ") if kv),
                    "threads": int(fields.get("threads", 1)),
                    "resources": {k: int(v) if v.isdigit() else v for k, v in resources.items()}})
    return out


GPU_RULES = {"decode", "decode_transfer", "time", "sweep", "time_sweep", "train_head", "distill_draft",
             "train_head_lambda", "sweep_lambda"}


class Resources(dict):
    """A job's resources as the SLURM plugin reads them: .get(name) and attributes."""

    __getattr__ = dict.get


def test_slurm_profile_requests_each_gpu_once(tree):
    """Regression: every GPU job asked for its GPU twice (rule resource gpu=1 and the profile's gres gpu:1), which
    the SLURM plugin submits as both --gres and --gpus, and itself calls mutually exclusive."""
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    paper["lambda_sweep"] = {"tasks": ["gsm8k"], "values": [0.0, 0.1]}  # every GPU rule in the DAG
    (tree / "paper-lambda.yaml").write_text(yaml.safe_dump(paper))
    done = snakemake("-n", "--forceall", "--profile", "workflow/profiles/slurm", "--configfile", "paper-lambda.yaml",
                     cwd=tree)
    assert set(jobs(done.stdout)) >= GPU_RULES
    planned_jobs = [j for j in planned(done.stdout) if j["rule"] in GPU_RULES]
    assert len(planned_jobs) == sum(n for rule, n in jobs(done.stdout).items() if rule in GPU_RULES)
    for job in planned_jobs:
        r = job["resources"]
        assert r.get("gpu") == 1 and "gpu" not in str(r.get("gres", "")), job  # one way: the rule's gpu
        assert r.get("runtime") and r.get("slurm_partition") == "gpu", job
    try:
        from snakemake_executor_plugin_slurm.submit_string import get_submit_command
        from snakemake_executor_plugin_slurm.utils import set_gres_string
    except ImportError:  # the `slurm` extra is not installed: the resources above are what the plugin reads
        return
    for job in planned_jobs:
        fake = SimpleNamespace(resources=Resources(job["resources"]), threads=job["threads"])
        params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": job["rule"], "account": "",
                  "partition": f"-p {job['resources']['slurm_partition']}", "workdir": str(tree)}
        sbatch = get_submit_command(fake, params) + set_gres_string(fake)
        assert sbatch.count("--gpus=") + sbatch.count("--gres=") == 1 and " --gpus=1" in sbatch, sbatch
        assert f"-t {job['resources']['runtime']}" in sbatch and "--cpus-per-task=4" in sbatch, sbatch


def test_aggregate_plot_report_and_fetch_sources_are_local_rules():
    """On a cluster they run on the submitting node: a minute of CPU is not worth a queue wait, and fetching
    needs the internet that compute nodes may lack."""
    text = "\n".join(p.read_text() for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])
    local = {name for block in re.findall(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", text, flags=re.M)
             for name in re.findall(r"\w+", block)}
    assert {"aggregate", "plot", "report", "fetch_sources"} <= local


def test_paper_config_fetches_every_hub_source_before_any_gpu_job(tree):
    """Regression: the hub models (two of them gated) and datasets were first downloaded by 800 racing GPU jobs."""
    done = snakemake("-n", "--forceall", "-p", "--configfile", "config/paper.yaml", "config/paper-gemma.yaml",
                     cwd=tree)  # Gemma 3 layered: three pairs
    assert jobs(done.stdout)["fetch_sources"] == 1
    gpu_jobs = [j for j in planned(done.stdout) if j["rule"] in GPU_RULES]
    # 24 timing jobs and 24 sweep timing jobs
    assert len(gpu_jobs) == 228 and all("resources/sources.json" in j["input"] for j in gpu_jobs)
    fetch = next(line for line in done.stdout.splitlines() if "diversed fetch-sources" in line)
    for source in ("meta-llama/Llama-3.1-8B-Instruct", "google/gemma-3-4b-it", "Qwen/Qwen3-0.6B"):
        assert f"--model {source} " in fetch
    assert all(f"--task {t} " in fetch for t in ("gsm8k", "cnndm", "xsum", "mbpp"))


def test_local_models_and_data_need_no_fetch(tree):
    assert "fetch_sources" not in dag(tree) and "fetch_sources" not in dag(tree, "--configfile", "config/smoke.yaml")
    # a local pair on a hub dataset: the jobs of that task, and only they, wait for a fetch of no model
    tasks = {"arith": {}, "gsm8k": {"n_eval": 2, "n_train": 2, "max_new_tokens": 8}}
    done = snakemake("-n", "--forceall", "-p", "--configfile", with_config(tree, tasks=tasks, transfer=[]), cwd=tree)
    gpu_jobs = [j for j in planned(done.stdout) if j["rule"] in GPU_RULES]
    assert {j["wildcards"]["task"] for j in gpu_jobs} == {"arith", "gsm8k"}
    assert all(("resources/sources.json" in j["input"]) == (j["wildcards"]["task"] == "gsm8k") for j in gpu_jobs)
    fetch = next(line for line in done.stdout.splitlines() if "diversed fetch-sources" in line)
    assert "--task gsm8k" in fetch and "--model" not in fetch


def test_lambda_is_chosen_on_dev_for_the_tasks_of_the_lambda_sweep(tree):
    """A task of lambda_sweep gets its head from sweep_lambda (a head per value, decoded on dev beside strict), never
    from train_head at the config's lambda; the other tasks train at it; nothing of the sweep decodes eval."""
    config = with_config(tree, lambda_sweep={"tasks": ["arith"], "values": [0.1, 0.5]})
    done = snakemake("-n", "--forceall", "-p", "--configfile", config, cwd=tree)
    counts = jobs(done.stdout)
    assert counts["train_head_lambda"] == 2 and counts["sweep_lambda"] == 1 and counts["train_head"] == 1
    heads = [line for line in done.stdout.splitlines() if "diversed train head" in line]
    assert sorted(re.search(r"--task (\w+)", h).group(1) for h in heads) == ["arith", "arith", "open"]
    (line,) = [line for line in done.stdout.splitlines() if "diversed sweep-lambda" in line]
    assert "--split dev" in line and "--head-out results/heads/tiny/arith" in line
    assert "--heads results/lambda/tiny/arith/heads/lambda0.1/head.safetensors results/lambda/tiny/arith/heads/" \
           "lambda0.5/" in line


def test_quality_decodes_are_batched_and_timing_decodes_interleaved_at_batch_1(tree):
    """The decode, transfer, lambda and sweep jobs decode batch_size prompts together; the time job decodes the
    first n_timing eval prompts at batch 1, every method interleaved prompt by prompt, in one job, and the
    time_sweep job the sweep's points on the first dev prompts alike."""
    done = snakemake("-n", "--forceall", "-p", "--configfile", "config/smoke.yaml", cwd=tree)
    lines = re.findall(r"^Shell command: .*?(diversed (?:generate|sweep-weight|sweep-lambda) .*)$", done.stdout,
                       flags=re.M)
    assert len(lines) == 4 + 4 + 1 + 1 + 5 + 4  # decode, time, transfer, lambda, sweep, time_sweep jobs
    timing = [line for line in lines if "--label timing=1" in line]
    assert len(timing) == 4 + 4 and all("--interleave" in line and "--limit 2" in line and "--batch-size" not in line
                                    for line in timing)
    assert all("--batch-size 2" in line for line in lines if line not in timing)


def test_cluster_jobs_fit_a_partition_retry_and_never_wait_on_the_network(tree):
    """Regression: sweep asked SLURM for 1,120 minutes (above many partitions' 24 h limit, so sbatch refused it),
    one failed job stopped the DAG, and a GPU job with a W&B key on an offline node waited for the tracker's
    timeout. Each GPU rule's time limit covers twice its longest job computed by diversed.cost for the paper
    config, and stays within 24 h; failed jobs are retried and the others go on; GPU jobs run W&B and the hub
    offline (a W&B mode set by the user, e.g. disabled, is kept)."""
    from diversed.cost import longest_job_minutes

    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["retries"] >= 1 and profile["keep-going"] is True
    computed = longest_job_minutes(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    base = {"decode_transfer": "decode", "train_head_lambda": "train_head"}
    limits = {rule: profile["set-resources"][rule]["runtime"] for rule in GPU_RULES}
    for rule, minutes in limits.items():
        assert 2 * computed[base.get(rule, rule)] <= minutes <= 24 * 60, (rule, minutes, computed)
    done = snakemake("-n", "--forceall", "-p", "--configfile", with_config(tree, lambda_sweep={
        "tasks": ["arith"], "values": [0.0, 0.5]}), cwd=tree)
    commands = re.findall(r"^Shell command: (.*)$", done.stdout, flags=re.M)
    gpu = [c for c in commands if re.search(r"diversed (generate|sweep-weight|sweep-lambda|train) ", c)]
    assert len(gpu) == sum(n for rule, n in jobs(done.stdout).items() if rule in GPU_RULES)
    # torch's CPU threads are the job's Snakemake threads (on SLURM, its cpus-per-task)
    assert all(re.match(r"OMP_NUM_THREADS=\d+ WANDB_MODE=\$\{WANDB_MODE:-offline\} HF_HUB_OFFLINE=1 diversed ", c)
               for c in gpu), gpu


def test_paper_config_runs_as_the_authors_did(tree):
    """config/paper.yaml decodes with the models' own top-k / top-p and the authors' raw templates, trains the
    head with their relative acceptance term and fine-tunes the draft on reference answers; the default config
    keeps chat prompts, the full vocabulary, a fixed lambda and distillation."""
    def commands(configfile):
        done = snakemake("-n", "--forceall", "-p", "--configfile", configfile, cwd=tree)
        return re.findall(r"^Shell command: .*?(diversed (?:generate|sweep-weight|sweep-lambda|train \w+) .*)$",
                          done.stdout, flags=re.M)

    paper, default = commands("config/paper.yaml"), commands("config/config.yaml")
    # lambda is chosen on dev among several values: only the term is common to all heads
    for lines, (sampling, fmt, term, finetune) in ((paper, ("model", "raw", "relative", "sft")),
                                                   (default, ("full", "chat", "fixed", "distill"))):
        decodes = [c for c in lines if c.startswith(("diversed generate", "diversed sweep-"))]
        assert decodes and all(f"--sampling {sampling} --prompt-format {fmt}" in c for c in decodes)
        heads = [c for c in lines if c.startswith("diversed train head")]
        assert heads and all(f"--acceptance-term {term}" in c and f"--prompt-format {fmt}" in c for c in heads)
        drafts = [c for c in lines if c.startswith("diversed train draft")]
        assert drafts and all(f"--finetune {finetune} --prompt-format {fmt}" in c for c in drafts)

"""The workflow's plan (diversed.experiment.plan) and the Snakefile that reads it: the jobs, runs, flags, threads and
inputs of each config asserted on the plan's table (in-process, no Snakemake), and Snakemake itself for what only
it decides (lint, wildcard matching, that its DAG and shell commands are the plan's, a dry run without the ML
stack, the SLURM profile). The smoke config end to end: tests/workflow/test_smoke.py."""

from __future__ import annotations

import re
import resource
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from helpers import ROOT, jobs, snakemake, workflow_copy

from diversed.experiment.plan import MODEL_RULES, Plan, load

SMOKE = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


def smoke(**change) -> Plan:
    """The smoke config's plan with some top-level keys changed."""
    return Plan(SMOKE | change)


def paper(*extra: str) -> Plan:
    return load(ROOT / "config" / "paper.yaml", *(ROOT / "config" / e for e in extra))


def commands(plan: Plan, rule: str, flag: str) -> list[str]:
    return [job.flags[flag] for job in plan.of(rule)]


# ------------------------------------------------------------------------------------------ the plan's table


@pytest.mark.parametrize("extra,pairs", [((), 2), (("paper-gemma.yaml",), 3), (("paper-lambda.yaml",), 2)])
def test_paper_config_plans_its_full_dag(extra, pairs):
    """The two pairs of the paper's tables; Gemma 3 layered on top (opt-in) adds a third with every other setting;
    lambda at the authors' 5%, or chosen on dev per task with config/paper-lambda.yaml layered on top."""
    counts = paper(*extra).counts()
    # one decode job per pair x 4 tasks x 2 temperatures x 3 seeds (on GSM8K and MBPP, AutoJudge's tasks, with the
    # judge's runs), + pairs x 2 transfers x 3 seeds
    assert counts["decode"] == pairs * 4 * 2 * 3
    assert counts["decode_transfer"] == pairs * 2 * 3
    assert counts["sweep"] == pairs * 4 * 2 + pairs * 2  # pairs x 4 tasks x 2 T at K = 5, + pairs x 2 figure K
    for rule in ("time", "time_sweep"):  # one job per (pair, task, T): every method
        assert counts[rule] == pairs * 4 * 2
    # AutoJudge on GSM8K and MBPP; CNN/DM's labels mined too, for the GSM8K judge's AUC where it transfers
    assert counts["mine_judge"] == pairs * 3 and counts["train_judge"] == pairs * 2
    assert counts["distill_draft"] == pairs * 4
    if "paper-lambda.yaml" in extra:  # every task's lambda chosen on dev: a head per value and a sweep_lambda
        assert "train_head" not in counts
        assert counts["train_head_lambda"] == pairs * 4 * 3 and counts["sweep_lambda"] == pairs * 4
    else:
        assert counts["train_head"] == pairs * 4 and "train_head_lambda" not in counts and "sweep_lambda" not in counts
        assert {j.train.acceptance_weight for j in paper(*extra).of("train_head")} == {0.05}
    assert counts["fetch_sources"] == counts["aggregate"] == counts["plot"] == counts["report"] == 1


def test_autojudge_transfers_with_its_own_tasks_judge_and_threshold():
    """#50: a transfer from a task AutoJudge runs on decodes with that task's judge at the threshold its sweep chose
    on that task's dev prompts, beside DIVERSED with that task's head; the judge's AUC is taken on the eval task's
    labels (mined for it). A transfer from a task without a judge runs DIVERSED alone."""
    plan = paper()
    job = plan.job("decode_transfer", {"pair": "llama", "task": "cnndm", "head_task": "gsm8k", "T": "1.0",
                                       "seed": "0"})
    runs = {r.method: r for r in job.runs}
    assert set(runs) == {"dynamic@gsm8k", "judge@gsm8k"}
    judge = runs["judge@gsm8k"]
    assert judge.verifier == "judge" and judge.task == "cnndm" and judge.changes == {
        "judge": "results/judges/llama/gsm8k/judge.safetensors",
        "weight_file": "results/sweeps/llama/gsm8k/T1.0-K5/choice.json"}
    assert runs["dynamic@gsm8k"].changes["head"] == "results/heads/llama/gsm8k/head.safetensors"
    assert job.inputs["judge"] == judge.changes["judge"] and job.inputs["weights"] == [judge.changes["weight_file"]]
    assert "label:method=judge label:head_task=gsm8k" in judge.spec()
    back = plan.job("decode_transfer", {"pair": "llama", "task": "gsm8k", "head_task": "cnndm", "T": "1.0",
                                        "seed": "0"})
    assert [r.method for r in back.runs] == ["dynamic@cnndm"] and "judge" not in back.inputs
    train = plan.job("train_judge", {"pair": "llama", "task": "gsm8k"})
    assert train.inputs["eval_labels"] == ["results/judges/llama/cnndm/labels/manifest.json"]
    assert train.flags["eval_labels"] == "--eval-labels results/judges/llama/cnndm/labels"
    assert plan.job("train_judge", {"pair": "llama", "task": "mbpp"}).flags["eval_labels"] == ""
    assert plan.job("mine_judge", {"pair": "llama", "task": "cnndm"})
    with pytest.raises(ValueError, match="no train_judge job"):
        plan.job("train_judge", {"pair": "llama", "task": "cnndm"})


def test_paper_config_runs_block_verification_beside_strict():
    """#34 item 3: the lossless baseline beside strict in every decode and timing job of the paper config."""
    plan = paper()
    for job in plan.of("decode") + plan.of("time"):
        runs = {r.method: r for r in job.runs}
        assert runs["block"].verifier == "block" and runs["block"].changes == {} and "strict" in runs


def test_paper_config_runs_the_authors_settings_beside_the_dev_choices():
    """#33 item 4: the static ensemble at w = 0.7 (linear) and cascades at 0.5 (the paper's deferral) decode
    every eval setting as given, quality and timing alike, beside fixed and cascade at their sweeps' choices."""
    plan = paper()
    for job in plan.of("decode") + plan.of("time"):
        runs = {r.method: r for r in job.runs}
        assert {"fixed", "cascade", "fixed-0.7", "cascade-0.5"} <= set(runs), job.wildcards
        assert runs["fixed-0.7"].verifier == "fixed" and runs["fixed-0.7"].changes == {"weight": 0.7,
                                                                                      "mixing": "linear"}
        assert runs["cascade-0.5"].changes == {"knob": 0.5, "deferral": "opt"}
        assert "weight_file" in runs["fixed"].changes and "weight_file" in runs["cascade"].changes
        assert "weight=0.7 mixing=linear label:method=fixed-0.7" in job.flags["runs"]
        assert runs["fixed-0.7"].dir.split("/")[4] == "fixed-0.7"
    # a given setting reads no sweep's choice
    plan = smoke(methods=["autoregressive", "strict"], given={"fixed": [0.5], "lenient": [0.3]})
    assert "weights" not in plan.of("decode")[0].inputs and {r.method for r in plan.of("decode")[0].runs} == {
        "autoregressive", "strict", "fixed-0.5", "lenient-0.3"}


def test_default_config_plan():
    counts = load(ROOT / "config" / "config.yaml").counts()
    # (capitals, open) x (T = 0.1, 1) x 1 seed, capitals' with AutoJudge's runs; the transfer runs at T = 1 only
    assert counts["prepare_models"] == 1 and counts["decode"] == 4
    assert counts["decode_transfer"] == 2 and counts["mine_judge"] == counts["train_judge"] == 1
    assert counts["sweep"] == 4  # (capitals, open) x (T = 0.1, 1) at K = 5 (the figure's K = 5 among them)
    for rule in ("time", "time_sweep"):
        assert counts[rule] == 4
    assert "fetch_sources" not in counts


@pytest.mark.parametrize("configs", [["config.yaml"], ["smoke.yaml"], ["paper.yaml", "paper-gemma.yaml"]])
def test_every_file_has_one_job_and_every_input_a_maker(configs):
    """The plan's table: no file is written by two jobs, and every file a job reads is written by another job (or
    is the fetched sources' record)."""
    plan = load(*(ROOT / "config" / c for c in configs))
    rows = plan.rows()
    outputs = [p for row in rows for p in row["outputs"]]
    assert len(outputs) == len(set(outputs))
    made = set(outputs)
    orphans = [p for row in rows for p in row["inputs"] if p not in made]
    assert not orphans, orphans


def test_untimed_jobs_take_job_threads_and_timed_jobs_every_core():
    """Untimed jobs (quality decodes, sweeps, training) take job_threads (the default's 1: two at a time on 2
    cores); a timed decode and the pair's build take every core (None), so nothing runs beside them."""
    plan = load(ROOT / "config" / "config.yaml")
    threads = {}
    for job in plan.jobs:
        threads.setdefault(job.rule, set()).add(job.threads)
    assert threads["time"] == threads["time_sweep"] == threads["prepare_models"] == {None}
    for rule in ("decode", "decode_transfer", "sweep", "sweep_lambda", "train_head", "train_head_lambda",
                 "distill_draft"):
        assert threads[rule] == {1}, (rule, threads)
    assert {job.threads for job in smoke(job_threads=None).of("decode")} == {None}  # null: every core


def test_target_only_runs_once_per_pair_task_temperature_seed():
    """Regression: the target-only (and draft-only) run was decoded once per K."""
    plan = smoke(K=[2, 3], transfer=[])
    decodes = plan.of("decode")  # open's, and arith's with AutoJudge's runs
    runs = [r for job in decodes for r in job.runs]
    target_only = [r for r in runs if r.verifier == "autoregressive"]
    assert len(decodes) == len(target_only) == 2 * 2  # 2 tasks x 2 temperatures x 1 seed, no K
    assert all(r.K is None and "-K" not in r.dir and " K=" not in r.spec() for r in target_only)
    assert len(runs) - len(target_only) == 2 * 2 * (6 + 7)  # temperatures x K x speculative methods of each task


def test_a_decode_job_decodes_every_method_of_its_setting():
    """On a cluster, a run and its target-only baseline must run on the same GPU: one job decodes every method at
    one (pair, task, T, seed), the target-only run first, and scores them; a method whose setting a sweep
    chooses reads that sweep's choice."""
    plan = smoke()
    assert len(plan.of("decode")) == 4  # open's; arith's, with AutoJudge's runs
    for job in plan.of("decode"):
        judged = job.wildcards["task"] == "arith"
        assert [r.method for r in job.runs] == [m for m in SMOKE["methods"] if judged or m != "judge"]
        assert job.flags["runs"].count("--run ") == 7 + judged
        for r in job.runs:
            chosen = r.method in ("fixed", "cascade", "lenient", "judge")
            assert ("weight_file" in r.changes) == chosen
            assert ("judge" in r.changes) == (r.method == "judge")  # the task's classifier
            if chosen:
                assert r.changes["weight_file"] in job.inputs["weights"]
        finetuned = next(r for r in job.runs if r.method == "finetuned")
        assert finetuned.verifier == "strict" and finetuned.changes["draft"] == job.inputs["draft"]


def test_one_path_per_temperature():
    """Regression: T = 1 and T = 1.0 made two sweeps (and T1-K3 vs T1.0-K3 paths) of the same setting."""
    plan = smoke(temperatures=[1], K=[2])
    paths = [r.dir for r in plan.runs]
    assert not any("/T1-" in p for p in paths) and any("/T1.0-K2" in p for p in paths)
    assert plan.counts()["sweep"] == 2  # arith and open at (T = 1.0, K = 2): the figure's sweep too


def test_sweeps_decode_the_dev_split():
    """Every setting is chosen on n_dev prompts of the dev split, never on the eval prompts the tables report."""
    tasks = {name: {"n_eval": 3, "n_dev": 2, "n_train": 4, "max_new_tokens": 8} for name in ("arith", "open")}
    plan = smoke(tasks=tasks)
    for rule in ("sweep", "sweep_lambda", "time_sweep"):
        assert {r.split for job in plan.of(rule) for r in job.runs} == {"dev"}
        assert all("--split dev -n 2" in f for f in commands(plan, rule, "prompts"))
    assert all("--limit 2" in f for f in commands(plan, "time_sweep", "prompts"))  # the fronts' speed
    for rule in ("decode", "time", "decode_transfer"):
        assert {r.split for job in plan.of(rule) for r in job.runs} == {"eval"}
        assert all(" -n 3" in f and "--split" not in f for f in commands(plan, rule, "prompts"))


@pytest.mark.parametrize(("change", "message"), [
    ({"temperatures": [-1.0]}, r"temperatures\[0\]: must be > 0, got -1.0"),
    ({"methods": ["beam"]}, r"methods\[0\]: 'beam' is not one of autoregressive, draft"),
    ({"tasks": {"mmlu": {}}}, "tasks: unknown task.s. mmlu"),
    ({"pairs": {"p": {"target": "x"}}}, "pairs.p.draft: required, not given"),
    ({"seeds": "zero"}, "seeds: expected a list, got 'zero'"),
    ({"lambda_sweep": {"tasks": ["arith"], "values": []}}, "lambda_sweep names tasks but no values"),
    ({"methods": ["strict", "typical"]}, "sweep.families"),
    ({"sweep": {"families": {"topk": [1.5]}}}, r"sweep.families.topk\[0\]: expected an integer, got 1.5"),
    ({"execution": {"timed_capture": "graph"}}, "needs a CUDA device; pair.s. tiny run on the CPU"),
    ({"given": {"fixed": [1.5]}}, r"given.fixed\[0\]: must be <= 1, got 1.5"),
    ({"given": {"dynamic": [0.5]}}, "given.dynamic: unknown key; allowed: fixed, cascade"),
    ({"train_head": {"lr": float("nan")}}, "train_head.lr: nan is not a finite number"),
    ({"train_head": {"task": "gsm8k"}}, "train_head.task: unknown key"),  # the plan sets it per job
    ({"judge": {"holdout": 1.0}}, "judge.holdout: must be < 1, got 1.0"),
    ({"sweep": {"deferrals": ["token"], "tolerance": -0.1}}, "sweep.tolerance: must be >= 0"),
])
def test_bad_config_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        smoke(**change)


def test_the_authors_protocol_gives_every_setting_theirs_and_a_key_the_config_sets_wins():
    """#47: protocol authors sets each setting of diversed.protocol to the authors' value (their decode to length,
    scoring, acceptance term, schedule, prompt cut, ...); a key the config sets itself wins; standard leaves each
    setting at its own default. config/paper.yaml runs the authors' protocol and names each setting itself."""
    from diversed import protocol

    def flag(name: str, value) -> str:
        return f"--{name.replace('_', '-')} {value}"

    theirs = smoke(protocol="authors")
    for step in protocol.STEPS:
        section, _, name = step.key.rpartition(".")
        rule, key = {"": ("decode", "decoding"), "train_head": ("train_head", "config"),
                     "distill": ("distill_draft", "config")}[section]
        own = (SMOKE.get(section) or {}) if section else SMOKE
        expected = own.get(name, step.authors)  # the smoke config's own key wins (its rollouts sample)
        if name in ("sampling", "prompt_format"):  # the run's flags of these go with the pair's prompts
            assert getattr(theirs.experiment, name) == expected
            continue
        assert all(flag(name, expected) in c for c in commands(theirs, rule, key)), (step.key, rule)
    assert all("--stop markers" in c for c in commands(smoke(protocol="authors", stop="markers"), "decode",
                                                        "decoding"))
    standard = smoke()
    assert standard.experiment.protocol == "standard" and all("--stop markers" in c for c in commands(
        standard, "decode", "decoding"))
    assert all("--schedule cosine" in c and "--acceptance-term fixed" in c for c in commands(standard, "train_head",
                                                                                              "config"))
    text = (ROOT / "config" / "paper.yaml").read_text()
    assert "protocol: authors" in text and paper().experiment.stop == "length"
    for step in protocol.STEPS:  # each named in the paper config itself, at the authors' value
        section, _, name = step.key.rpartition(".")
        written = yaml.safe_load(text)
        assert (written[section] if section else written)[name] == step.authors, step.key
    with pytest.raises(ValueError, match="protocol: unknown protocol 'theirs'; allowed: standard, authors"):
        smoke(protocol="theirs")


def test_quality_decodes_are_batched_and_timing_decodes_interleaved_at_batch_1():
    """The decode, transfer, lambda and sweep jobs decode batch_size prompts together; the time job decodes the
    first n_timing eval prompts at batch 1, every method interleaved prompt by prompt, in one job, and the
    time_sweep job the sweep's points on the first dev prompts alike."""
    plan = smoke()
    for job in plan.jobs:
        if job.runs:
            timed = job.rule in ("time", "time_sweep")
            assert {r.batch_size for r in job.runs} == ({1} if timed else {2}) and {r.timing for r in job.runs} == {
                timed}, job.rule
            assert ("batch" in job.flags) != timed
    assert {r.prompts for job in plan.of("time") for r in job.runs} == {2}


def test_timed_jobs_take_their_own_capture():
    """#32 item 3: the paper config times its batch-1 jobs with CUDA graphs and decodes its batched ones eagerly;
    without timed_capture every job takes execution.capture."""
    captures = {}
    for job in load(ROOT / "config" / "paper.yaml").jobs:
        if job.rule in ("decode", "decode_transfer", "sweep", "time", "time_sweep", "train_head"):
            captures.setdefault(job.rule, set()).add(job.flags["execution"])
    assert captures["time"] == captures["time_sweep"] == {"--capture graph"}
    assert captures["decode"] == captures["sweep"] == captures["train_head"] == {"--capture none"}
    assert {j.flags["execution"] for j in smoke().jobs if j.rule in ("time", "decode")} == {"--capture none"}


def test_lambda_is_chosen_on_dev_for_the_tasks_of_the_lambda_sweep():
    """A task of lambda_sweep gets its head from sweep_lambda (a head per value, decoded on dev beside strict),
    never from train_head at the config's lambda; the other tasks train at it."""
    plan = smoke(lambda_sweep={"tasks": ["arith"], "values": [0.1, 0.5]})
    counts = plan.counts()
    assert counts["train_head_lambda"] == 2 and counts["sweep_lambda"] == 1 and counts["train_head"] == 1
    assert sorted(j.train.task for j in plan.jobs if j.rule.startswith("train_head")) == ["arith", "arith", "open"]
    assert [j.train.acceptance_weight for j in plan.of("train_head_lambda")] == [0.1, 0.5]
    (job,) = plan.of("sweep_lambda")
    assert job.flags["head_out"] == "results/heads/tiny/arith" and job.outputs["head"] == \
        "results/heads/tiny/arith/head.safetensors"
    assert job.inputs["heads"] == [f"results/lambda/tiny/arith/heads/lambda{x}/head.safetensors" for x in (0.1, 0.5)]


def test_paper_config_fetches_every_hub_source_before_any_gpu_job():
    """Regression: the hub models (two of them gated) and datasets were first downloaded by 800 racing GPU jobs."""
    plan = paper("paper-gemma.yaml")
    gpu_jobs = [j for j in plan.jobs if j.rule in MODEL_RULES]
    assert len(gpu_jobs) == 201 and all(j.inputs["sources"] == "resources/sources.json" for j in gpu_jobs)
    assert all(j.gpu == 1 for j in gpu_jobs)
    (fetch,) = plan.of("fetch_sources")
    for source in ("meta-llama/Llama-3.1-8B-Instruct", "google/gemma-3-4b-it", "Qwen/Qwen3-0.6B"):
        assert f"--model {source}" in fetch.flags["models"]
    assert all(f"--task {t}" in fetch.flags["tasks"] for t in ("gsm8k", "cnndm", "xsum", "mbpp"))


def test_local_models_and_data_need_no_fetch():
    assert "fetch_sources" not in load(ROOT / "config" / "config.yaml").counts()
    assert "fetch_sources" not in smoke().counts()
    # a local pair on a hub dataset: the jobs of that task, and only they, wait for a fetch of no model
    plan = smoke(tasks={"arith": {}, "gsm8k": {"n_eval": 2, "n_train": 2, "max_new_tokens": 8}}, transfer=[],
                 sweep={"figure_tasks": []} | {k: v for k, v in SMOKE["sweep"].items() if k != "figure_tasks"})
    gpu_jobs = [j for j in plan.jobs if j.rule in MODEL_RULES]
    assert {j.wildcards["task"] for j in gpu_jobs} == {"arith", "gsm8k"}
    assert all(("sources" in j.inputs) == (j.wildcards["task"] == "gsm8k") for j in gpu_jobs)
    (fetch,) = plan.of("fetch_sources")
    assert "--task gsm8k" in fetch.flags["tasks"] and not fetch.flags["models"]


def test_paper_config_runs_as_the_authors_did():
    """config/paper.yaml decodes with the models' own top-k / top-p and the authors' raw templates, trains the
    head with their acceptance term and fine-tunes the draft on reference answers; the default config keeps chat
    prompts, the full vocabulary, a fixed lambda and distillation."""
    for plan, (sampling, fmt, term, finetune) in ((paper(), ("model", "raw", "authors", "sft")),
                                                  (load(ROOT / "config" / "config.yaml"),
                                                   ("full", "chat", "fixed", "distill"))):
        decodes = [j for j in plan.jobs if "decoding" in j.flags]
        assert decodes and all(f"--sampling {sampling} --prompt-format {fmt}" in j.flags["decoding"] for j in decodes)
        heads = [j.train for j in plan.jobs if j.rule.startswith("train_head")]
        assert heads and all(h.acceptance_term == term and h.prompt_format == fmt for h in heads)
        drafts = [j.train for j in plan.of("distill_draft")]
        assert drafts and all(d.finetune == finetune and d.prompt_format == fmt for d in drafts)
        assert all(f"--acceptance-term {term}" in j.flags["config"] for j in plan.jobs
                   if j.rule.startswith("train_head"))


def test_cluster_time_limits_cover_twice_the_longest_job_and_fit_a_partition():
    """Regression: sweep asked SLURM for 1,120 minutes (above many partitions' 24 h limit, so sbatch refused it)
    and one failed job stopped the DAG. Each GPU rule's time limit covers twice its longest job computed by
    diversed.experiment.cost for the paper config (with Gemma 3 layered: its jobs are the longest), and stays within
    24 h;
    failed jobs are retried and the others go on."""
    from diversed.experiment.cost import PRICED_AS, longest_job_minutes

    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["retries"] >= 1 and profile["keep-going"] is True
    computed = longest_job_minutes(paper("paper-gemma.yaml", "paper-lambda.yaml"))
    for rule in MODEL_RULES:
        minutes = profile["set-resources"][rule]["runtime"]
        assert 2 * computed[PRICED_AS.get(rule, rule)] <= minutes <= 24 * 60, (rule, minutes, computed)


def test_aggregate_plot_report_and_fetch_sources_are_local_rules():
    """On a cluster they run on the submitting node: a minute of CPU is not worth a queue wait, and fetching
    needs the internet that compute nodes may lack."""
    text = "\n".join(p.read_text() for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])
    local = {name for block in re.findall(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", text, flags=re.M)
             for name in re.findall(r"\w+", block)}
    assert {"aggregate", "plot", "report", "fetch_sources"} <= local


# ------------------------------------------------------------------------------------------ Snakemake



@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A fresh copy of the workflow: nothing the user's working tree has made or locked shows in a dry run."""
    return workflow_copy(tmp_path_factory.mktemp("workflow"))


def planned(dry_run_output: str) -> list[dict]:
    """Each job of a dry run's log: its rule, wildcards, threads, resources and shell command as printed."""
    blocks = re.finditer(r"^\s*rule (\w+):\n((?:\s+\w+: .*\n)+)(?:\n?Shell command: (.*)\n)?", dry_run_output,
                         flags=re.M)
    out = []
    for b in blocks:
        fields = dict(re.findall(r"^\s+(\w+): (.*)$", b.group(2), flags=re.M))
        resources = dict(kv.split("=", 1) for kv in fields.get("resources", "").split(", ") if "=" in kv)
        out.append({"rule": b.group(1), "input": fields.get("input", "").split(", "),
                    "wildcards": dict(kv.split("=", 1) for kv in fields.get("wildcards", "").split(", ") if kv),
                    "threads": int(fields.get("threads", 1)), "shell": b.group(3) or "",
                    "resources": {k: int(v) if v.isdigit() else v for k, v in resources.items()}})
    return out


@pytest.mark.slow
def test_lint_is_clean(tree):
    done = snakemake("--lint", cwd=tree)
    assert "Congratulations" in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("configs", [["config/config.yaml"], ["config/smoke.yaml"], ["config/paper.yaml"]])
def test_snakemake_runs_the_plans_jobs_with_the_plans_flags(tree, configs):
    """Snakemake's DAG is the plan's, job for job; each job's shell command holds the plan's flags, takes its
    threads (2 cores: untimed jobs one thread, timed jobs and the pair's build both) as torch's, and runs W&B and
    the hub offline."""
    from diversed.cli import build_parser

    parser = build_parser()
    plan = load(*(tree / c for c in configs))
    done = snakemake("-n", "--forceall", "-p", "--cores", "2", "--configfile", *configs, cwd=tree)
    assert {k: v for k, v in jobs(done.stdout).items() if k != "all"} == plan.counts()
    seen = [j for j in planned(done.stdout) if j["rule"] != "all"]
    assert len(seen) == len(plan.jobs)
    for job in seen:
        mine = plan.job(job["rule"], job["wildcards"])
        assert job["threads"] == min(mine.threads or 2, 2), job
        for name, value in mine.flags.items():  # (the draft recipe's id only makes a changed recipe rebuild)
            assert name == "recipe" or value in job["shell"], (job["rule"], name, value)
        if mine.rule in MODEL_RULES:
            assert job["shell"].startswith(f"OMP_NUM_THREADS={job['threads']} WANDB_MODE=${{WANDB_MODE:-offline}} "
                                           "HF_HUB_OFFLINE=1 diversed "), job["shell"]
            argv = shlex.split(job["shell"].split(" > ")[0])
            assert argv[3] == "diversed"
        if " diversed " in f" {job['shell']}":  # the command line takes every flag the plan gives it
            argv = shlex.split(job["shell"].split(" > ")[0])
            parser.parse_args(argv[argv.index("diversed") + 1:])


@pytest.mark.slow
def test_paper_dry_run_needs_no_ml_stack_and_parses_in_seconds(tree, tmp_path):
    """The paper config with Gemma 3 layered (213 jobs) dry-runs with torch, transformers, scipy and lm-eval
    unimportable, and Snakemake's whole run (start-up, parsing, the DAG) takes under 5 seconds of CPU time (its
    wall time also counts whatever else shares the cores: 5.4 s beside the other xdist worker on 2 cores)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'scipy', 'lm_eval'):\n"
        "            raise ImportError(f'{name} is unimportable in this test')\n"
        "sys.meta_path.insert(0, Block())\n")
    env = {"PYTHONPATH": str(tmp_path), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert "unimportable" in probe.stderr  # the block works
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", "config/paper.yaml",
                           "config/paper-gemma.yaml"], cwd=tree, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sum(jobs(done.stdout).values()) == 213 and seconds < 5, seconds


@pytest.mark.slow
def test_wildcards_do_not_swallow_each_other(tree):
    """Regression: T matched "0.1-K5", so a malformed path was planned as a run at temperature "0.1-K5"."""
    target = "results/runs/tiny/arith/strict/T0.1-K5-K3-s0/manifest.json"
    done = snakemake("-n", target, "--configfile", "config/smoke.yaml", cwd=tree, check=False)
    assert done.returncode != 0 and "rule decode:" not in done.stdout


@pytest.mark.slow
def test_bad_config_is_refused_before_any_job(tmp_path):
    wd = workflow_copy(tmp_path)
    (wd / "bad.yaml").write_text(yaml.safe_dump(SMOKE | {"methods": ["beam"]}))
    done = snakemake("-n", "--configfile", "bad.yaml", cwd=wd, check=False)
    assert done.returncode != 0 and "beam" in done.stdout + done.stderr and "rule " not in done.stdout


class Resources(dict):
    """A job's resources as the SLURM plugin reads them: .get(name) and attributes."""

    __getattr__ = dict.get


@pytest.mark.slow
def test_slurm_profile_requests_each_gpu_once(tree):
    """Regression: every GPU job asked for its GPU twice (rule resource gpu=1 and the profile's gres gpu:1), which
    the SLURM plugin submits as both --gres and --gpus, and itself calls mutually exclusive."""
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    config["lambda_sweep"] = {"tasks": ["gsm8k"], "values": [0.0, 0.1]}  # every GPU rule in the DAG
    (tree / "paper-lambda.yaml").write_text(yaml.safe_dump(config))
    done = snakemake("-n", "--forceall", "--profile", "workflow/profiles/slurm", "--configfile", "paper-lambda.yaml",
                     cwd=tree)
    assert set(jobs(done.stdout)) >= set(MODEL_RULES)
    planned_jobs = [j for j in planned(done.stdout) if j["rule"] in MODEL_RULES]
    assert len(planned_jobs) == sum(n for rule, n in jobs(done.stdout).items() if rule in MODEL_RULES)
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
        assert " -C " not in sbatch and "--constraint" not in sbatch, sbatch  # no site's feature name assumed (#49)


def test_what_the_html_report_shows_has_a_caption_and_only_the_main_outputs():
    """`snakemake --report`: every figure (PNG), the paper's and the harness's main tables and the claims are flagged
    with a caption file in workflow/report/; the PDF copies, the tidy tables and the .md/.tex forms are not."""
    from diversed.experiment.plan import TABLE_NAMES, shown

    for plan in (smoke(), paper()):
        outputs = [p for rule in ("aggregate", "plot", "report") for v in plan.job(rule, {}).outputs.values()
                   for p in ([v] if isinstance(v, str) else v)]
        flagged = {p: shown(p) for p in outputs if shown(p)}
        assert {p for p in flagged if p.endswith(".png")} == {p for p in outputs if p.endswith(".png")}
        assert {p for p, (c, _) in flagged.items() if c == "Tables"} == {f"results/tables/{n}.csv" for n in TABLE_NAMES}
        assert [p for p, (c, _) in flagged.items() if c == "Claims"] == ["results/claims.html"]
        for _, caption in flagged.values():
            assert (ROOT / "workflow" / "report" / f"{caption}.rst").is_file(), caption
    assert shown("figures/quality_vs_time_T0.1.pdf") is None and shown("results/tables/runs.csv") is None

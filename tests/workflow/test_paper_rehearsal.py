"""The paper reproduction rehearsed end to end, offline: config/paper.yaml with config/paper-gemma.yaml and
config/paper-lambda.yaml layered, run
by Snakemake on tiny random checkpoints of the paper pairs' classes and on local files in the hub datasets' row
formats, trimmed to the jobs that each test something distinct: the three pairs' classes, every job type of the
paper DAG at least once (and train_head, which the paper DAG does not need), every method, the transfer between
GSM8K and CNN/DM, one temperature, one seed and two prompts a split. XSum's and MBPP's rows and scorers are tested
in tests/tasks/test_tasks.py; the full paper DAG's structure in tests/workflow/test_workflow.py."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import yaml
from helpers import ROOT, hub_row, rewrite_generations, snakemake, thinking_tokenizer, tiny_paper_model, workflow_copy

from diversed.experiment.plan import MODEL_RULES

# pair -> (class of target and draft, the draft's size); the paper's: Llama 3.1 8B / 3.2 1B, Qwen3 8B / 0.6B,
# Gemma 3 12B / 4B (Gemma3ForConditionalGeneration, sliding window 8 here: every prompt crosses it)
PAIRS = {"llama": "llama3", "qwen": "qwen3", "gemma": "gemma3"}
ROWS = {"train": range(0, 3), "dev": range(10, 13), "eval": range(20, 23)}
# (top_k, top_p) of the real models' generation configs, which sampling: model applies; Llama 3's sets top-p only,
# and generate's default top-k 50 applies
SAVED = {"llama3": (None, 0.9), "qwen3": (20, 0.95), "gemma3": (64, 0.95)}
FILTERS = {kind: (50 if k is None else k, p) for kind, (k, p) in SAVED.items()}


def build_pair(root, name: str, kind: str) -> dict:
    """A target and a smaller draft of the class, saved with the character tokenizer (Qwen3's thinking template)."""
    from diversed.decoding.models import char_tokenizer

    tok = thinking_tokenizer() if kind == "qwen3" else char_tokenizer()
    paths = {}
    for role, seed, hidden, layers in (("target", 0, 64, 3), ("draft", 1, 32, 2)):
        paths[role] = root / name / role
        model = tiny_paper_model(kind, seed, hidden=hidden, layers=layers, ctx=4096)
        model.generation_config.do_sample = True  # as the real models' files: their filters are sampling flags
        model.generation_config.top_k, model.generation_config.top_p = SAVED[kind]
        model.save_pretrained(paths[role])
        tok.save_pretrained(paths[role])
    return {"target": str(paths["target"]), "draft": str(paths["draft"])}


TASKS = ("gsm8k", "cnndm")  # the paper's transfer pair: a checkable answer and a ROUGE-scored summary


def rehearsal_config(wd, build: bool = True) -> dict:
    """config/paper.yaml with local models and data, one temperature and seed, two prompts per split, a two-w
    sweep grid and short training; GSM8K's lambda chosen on dev, CNN/DM's head trained at the config's; every
    method, the transfer runs and the acceptance-vs-w figure's sweep as the paper's. build: write the models and
    data (else only their paths)."""
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    assert set(config["pairs"]) == {"llama", "qwen"}  # the pairs of the paper's tables; Gemma 3 is opt-in
    config["pairs"] |= yaml.safe_load((ROOT / "config" / "paper-gemma.yaml").read_text())["pairs"]
    assert config["lambda_sweep"]["tasks"] == [] and config["given"] == {"fixed": [0.7], "cascade": [0.5]}
    config["lambda_sweep"] |= yaml.safe_load((ROOT / "config" / "paper-lambda.yaml").read_text())["lambda_sweep"]
    assert set(config["pairs"]) == set(PAIRS) and {(t["head"], t["eval"]) for t in config["transfer"]} == {
        ("cnndm", "gsm8k"), ("gsm8k", "cnndm")}
    for name, kind in PAIRS.items():
        paths = build_pair(wd / "models", name, kind) if build else {r: str(wd / name / r) for r in ("target", "draft")}
        config["pairs"][name] |= paths | {"device": "cpu"}
    config["execution"] |= {"timed_capture": None}  # CUDA graphs need a GPU
    config["tasks"] = {}
    for task in TASKS:
        for split, ids in ROWS.items():
            path = wd / "data" / f"{task}-{split}.jsonl"
            if build:
                path.parent.mkdir(exist_ok=True)
                path.write_text("".join(json.dumps(hub_row(task, i)) + "\n" for i in ids))
        config["tasks"][task] = {"n_eval": 2, "n_dev": 2, "n_train": 2, "max_new_tokens": 12,
                                 "data_files": str(wd / "data" / f"{task}-{{split}}.jsonl")}
    config["temperatures"] = [1.0]
    config["seeds"] = [0]
    config["sweep"] |= {"weights": [0.5], "mixings": ["linear"], "figure_K": config["sweep"]["figure_K"][:1]}
    config["train_head"] |= {"epochs": 1, "batch_size": 2, "max_new_tokens": 8}
    config["lambda_sweep"] |= {"tasks": ["gsm8k"], "values": config["lambda_sweep"]["values"][:2]}
    assert config["judge"]["tasks"] == ["gsm8k", "mbpp"]
    config["judge"]["tasks"] = ["gsm8k"]  # AutoJudge where the paper's runs check an answer
    config["distill"] |= {"epochs": 1, "max_new_tokens": 8}
    return config


def test_the_rehearsal_runs_every_job_type_of_the_paper_dag(tmp_path):
    """What the trim removes is repetition: every rule of the paper DAG has a job in the rehearsal (fetch_sources
    aside: its sources are local), and train_head too, which the paper DAG never needs."""
    from diversed.experiment.plan import LOCAL_RULES, Plan, load

    paper = load(*(ROOT / "config" / f for f in ("paper.yaml", "paper-gemma.yaml", "paper-lambda.yaml"))).counts()
    counts = Plan(rehearsal_config(tmp_path, build=False)).counts()
    assert set(paper) - {"fetch_sources"} <= set(counts) and "train_head" in counts, counts

    def repeated(jobs):  # the rules of one job per workflow (fetch, aggregate, audit, plot, report) repeat nothing
        return sum(n for rule, n in jobs.items() if rule not in LOCAL_RULES)
    assert repeated(counts) <= repeated(paper) / 4, counts


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    wd = workflow_copy(tmp_path_factory.mktemp("paper"))
    config = rehearsal_config(wd)
    (wd / "rehearsal.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # one thread a job, two jobs at a time: nothing here is timed for the record, and most of a job is start-up
    one_thread = [f"{rule}=1" for rule in MODEL_RULES]
    snakemake("--profile", "workflow/profiles/local", "--cores", "2", "--set-threads", *one_thread,
              "--configfile", "rehearsal.yaml", cwd=wd, timeout=1800)
    return wd, config


@pytest.mark.slow
def test_every_table_figure_and_the_report(rehearsal):
    wd, config = rehearsal
    for name in ("table1", "table2", "table3", "transfer", "speed"):
        for ext in ("csv", "md", "tex"):
            assert (wd / "results" / "tables" / f"{name}.{ext}").stat().st_size > 0, name
    stems = ["acceptance_vs_weight", "weight_distribution"] + [
        f"{kind}_T{T:g}" for kind in ("quality_vs_time", "acceptance_by_position", "acceptance_vs_bias",
                                      "acceptance_vs_kl")
        for T in config["temperatures"]]
    expected = sorted(f"{stem}.{ext}" for stem in stems for ext in ("png", "pdf"))
    assert sorted(p.name for p in (wd / "figures").iterdir()) == expected
    report = (wd / "results" / "REPORT.md").read_text()
    assert all(f"Table {i}" in report for i in (1, 2, 3)) and "the fixed w was chosen on the" not in report
    claims = report.split("## Claims")[1].split("## DIVERSED heads")[0]
    assert [line for line in claims.splitlines() if line.startswith("### ")] == [
        "### T = 1", "### Transfer (at the transfer runs' temperature)"]
    assert claims.count("| **") == 14 + 1 and all(pair in claims for pair in PAIRS)  # 14 claims at T = 1, transfer
    assert "DIVERSED lies beyond the AutoJudge front" in claims
    # #47: the deviations table, generated from what ran, has a row for every step of the authors' protocol, and
    # the paper config (protocol authors) agrees on each
    from diversed import protocol

    deviations = report.split("## Deviations from the paper")[1]
    for step in protocol.STEPS:
        row = next(line for line in deviations.splitlines() if line.startswith(f"| {step.name} "))
        # the rehearsal layers config/paper-lambda.yaml: GSM8K's lambda chosen on dev among 0.02 and 0.05
        lam = step.key == "train_head.acceptance_weight"
        assert step.source in row and row.rstrip(" |").endswith("**no**" if lam else "yes"), row
    for name in ("eval prompts' length", "timed prompts"):  # where this harness differs on purpose
        assert next(line for line in deviations.splitlines() if line.startswith(f"| {name} ")).rstrip(
            " |").endswith("**no**")


@pytest.mark.slow
def test_every_pair_task_method_and_temperature_ran_and_was_scored(rehearsal):
    wd, config = rehearsal
    runs = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    methods = len(config["methods"]) + sum(map(len, config["given"].values()))  # fixed-0.7 and cascade-0.5 too
    # every method decoded for quality (batched) and timed (batch 1, interleaved), AutoJudge on GSM8K only, and the
    # transfer runs: DIVERSED both ways, AutoJudge from GSM8K
    assert len(runs) == 3 * 2 * (2 * methods - 1) + 3 * len(config["transfer"]) + 3
    assert runs["timing"].sum() == 3 * (2 * methods - 1)
    assert set(runs.loc[runs["head_task"].isna() & (runs["method"] == "judge"), "task"]) == {"gsm8k"}
    batched = runs.loc[~runs["timing"]].groupby("pair")["batch_size"].agg(set).to_dict()
    assert batched == {p: {config["pairs"][p].get("batch_size", config["batch_size"])} for p in PAIRS}
    assert batched["gemma"] == {16}  # its own rows (paper-gemma.yaml)
    assert set(runs["scoring"]) == {"authors"}  # cut at the stop markers, "#### N", ROUGE unstemmed
    assert set(runs["pair"]) == set(PAIRS) and set(runs["task"]) == set(TASKS)
    assert set(runs["method"]) == set(config["methods"]) | {"fixed-0.7", "cascade-0.5"}
    assert set(runs["temperature"]) == {1.0}
    assert runs["quality"].notna().all()
    table1 = pd.read_csv(wd / "results" / "tables" / "table1.csv")
    assert set(table1["pair"]) == set(PAIRS)
    # the fixed w of each (pair, task, T) was chosen on the dev split, every sweep on two prompts
    sweeps = pd.read_csv(wd / "results" / "tables" / "sweeps.csv")
    assert set(sweeps["split"]) == {"dev"} and set(sweeps["prompts"]) == {2} and set(sweeps["pair"]) == set(PAIRS)
    # with DIVERSED and the target alone beside the fronts, and each point of a sweep the runs read timed at batch 1
    assert {"strict", "fixed", "cascade", "lenient", "judge", "dynamic", "autoregressive"} == set(sweeps["verifier"])
    assert set(sweeps.loc[sweeps["verifier"] == "judge", "task"]) == {"gsm8k"}
    read = sweeps["K"].isin(config["K"])
    assert sweeps.loc[read, "speedup"].notna().all() and sweeps.loc[~read, "speedup"].isna().all()


@pytest.mark.slow
def test_autojudge_transfers_and_its_auc_is_taken_on_the_other_tasks_labels(rehearsal):
    """#50: the GSM8K judge decodes CNN/DM at GSM8K's threshold beside the GSM8K head; CNN/DM's labels are mined for
    its AUC there (CNN/DM has references), which the judge's manifest and the transfer table give."""
    wd, _ = rehearsal
    for pair in PAIRS:
        judge = json.loads((wd / "results" / "judges" / pair / "gsm8k" / "manifest.json").read_text())
        (other,) = judge["out_of_domain"]
        assert other["task"] == "cnndm" and other["labels"] == f"results/judges/{pair}/cnndm/labels"
        mined = json.loads((wd / other["labels"] / "manifest.json").read_text())
        assert (other["prompts"], other["mismatches"]) == (mined["prompts"], mined["mismatches"])
        assert not (wd / "results" / "judges" / pair / "cnndm" / "judge.safetensors").exists()  # labels only
        run = json.loads((wd / "results" / "runs" / pair / "cnndm" / "judge@gsm8k" / "T1.0-K5-s0" /
                          "manifest.json").read_text())
        assert run["labels"]["head_task"] == "gsm8k" and run["labels"]["method"] == "judge"
    transfer = pd.read_csv(wd / "results" / "tables" / "transfer.csv")
    judged = transfer[transfer["verifier"] == "AutoJudge"]
    assert set(judged["pair"]) == set(PAIRS) and set(judged["trained on"]) == {"gsm8k"}
    assert not judged["AUC on evaluated task"].str.startswith("– (no labels").any()
    assert set(transfer.loc[transfer["verifier"] == "DIVERSED", "trained on"]) == {"gsm8k", "cnndm"}
    table3 = pd.read_csv(wd / "results" / "tables" / "table3.csv")
    assert set(table3.loc[table3["head trained on"] == "gsm8k (AutoJudge)", "pair"]) == set(PAIRS)


@pytest.mark.slow
def test_gemma_decodes_cross_its_sliding_window(rehearsal):
    wd, _ = rehearsal
    rows = [json.loads(line) for path in (wd / "results" / "runs" / "gemma").rglob("generations.jsonl")
            for line in path.read_text().splitlines()]
    assert rows and all(r["prompt_tokens"] + r["new_tokens"] > 8 for r in rows)


@pytest.mark.slow
def test_speed_is_compared_within_one_decode_job(rehearsal):
    """Each timed speculative run has a speedup over its target-only baseline, timed in the same job (same
    hardware); a batched quality run has none."""
    wd, _ = rehearsal
    speed = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    assert speed["hardware"].nunique() == 1
    timed = speed[speed["timing"] & (speed["method"] != "autoregressive")]
    assert len(timed) and timed["speedup"].notna().all() and speed.loc[~speed["timing"], "speedup"].isna().all()


@pytest.mark.slow
def test_decodes_and_training_ran_with_the_authors_settings(rehearsal):
    """sampling: model took each pair's generation-config filters, prompts are the authors' raw templates (no
    chat template), decodes ran on to their length, the head trained with the authors' acceptance term, schedule
    and prompt cut, and the fine-tuned draft on references."""
    wd, config = rehearsal
    assert (config["sampling"], config["prompt_format"]) == ("model", "raw")
    for name, kind in PAIRS.items():
        manifests = [json.loads(p.read_text()) for p in (wd / "results" / "runs" / name).rglob("manifest.json")]
        assert manifests
        for m in manifests:
            top_k, top_p = FILTERS[kind]
            assert m["decoding"]["sampling"]["top_k"] == top_k and m["decoding"]["sampling"]["top_p"] == top_p
            assert m["config"]["prompt_format"] == "raw" and m["config"]["stop"] == "length"  # decoded as theirs
    gens = [json.loads(line) for line in next((wd / "results" / "runs" / "llama" / "gsm8k").rglob(
        "generations.jsonl")).read_text().splitlines()]
    assert all(g["prompt"].startswith("Question: ") and g["prompt"].endswith("\n\nAnswer:") for g in gens)
    # GSM8K's head is the one its lambda sweep chose on dev, CNN/DM's trained at the config's; both the authors' way
    heads = {p.parent.parent.name + "/" + p.parent.name: json.loads(p.read_text())
             for p in (wd / "results" / "heads").rglob("manifest.json")}
    candidates = config["lambda_sweep"]["values"]
    assert len(heads) == len(PAIRS) * len(config["tasks"])
    assert all((h["config"]["acceptance_term"], h["config"]["schedule"], h["config"]["prompt_keep"]) ==
               ("authors", "authors", "first") for h in heads.values())  # the authors' protocol (#47)
    swept = [h for name, h in heads.items() if name.endswith("/gsm8k")]
    assert len(swept) == len(PAIRS) and all(
        h["chosen"]["split"] == "dev" and h["config"]["acceptance_weight"] in candidates
        and [c["lambda"] for c in h["chosen"]["candidates"]] == candidates for h in swept)
    assert all(h["config"]["acceptance_weight"] == config["train_head"]["acceptance_weight"] and not h.get("chosen")
               for name, h in heads.items() if name.endswith("/cnndm"))
    lam = pd.read_csv(wd / "results" / "tables" / "lambda.csv")
    assert len(lam) == len(PAIRS) * (1 + len(candidates))
    assert (lam["chosen"] == "yes").sum() == len(swept) and set(lam["dev prompts"]) == {2}
    drafts = [json.loads(p.read_text()) for p in (wd / "resources" / "drafts").rglob("distill_manifest.json")]
    assert drafts and all(d["config"]["finetune"] == "sft" for d in drafts)


@pytest.mark.slow
def test_the_authors_settings_ran_beside_the_dev_choices(rehearsal):
    """#33 items 4 and 7: the static ensemble at w = 0.7 (linear) and the cascade at 0.5 (the config's deferral)
    decoded every eval setting as given, beside fixed and cascade at their dev sweeps' choices; the families table
    and the deviations row show them."""
    wd, _ = rehearsal
    runs = pd.read_csv(wd / "results" / "tables" / "runs.csv")
    quality = runs[~runs["timing"]]
    given = {m: quality[quality["method"] == m] for m in ("fixed-0.7", "cascade-0.5")}
    settings = len(PAIRS) * len(TASKS)
    assert all(len(g) == settings for g in given.values())
    assert set(given["fixed-0.7"]["weight"]) == {0.7} and set(given["fixed-0.7"]["mixing"]) == {"linear"}
    assert set(given["cascade-0.5"]["knob"]) == {0.5} and set(given["cascade-0.5"]["deferral"]) == {"opt"}
    assert len(quality[quality["method"] == "fixed"]) == len(quality[quality["method"] == "cascade"]) == settings
    families = pd.read_csv(wd / "results" / "tables" / "families.csv")
    assert (families["method"] == "Static ensemble (fixed w), w = 0.7 (given)").sum() == settings
    report = (wd / "results" / "REPORT.md").read_text()
    static = next(line for line in report.splitlines() if line.startswith("| static ensemble at the authors' w"))
    cascade = next(line for line in report.splitlines() if line.startswith("| cascade at the authors' lenience"))
    # #47 item 7: never "yes": their static path is not public and their one static code mixes logits; their
    # cascade rule is not public
    assert "w 0.7, linear" in static and static.rstrip(" |").endswith("**no**")
    assert cascade.rstrip(" |").endswith("not public")


@pytest.mark.slow
def test_heads_train_and_decode_with_logit_mixing_and_runs_rescore_as_the_authors(rehearsal, tmp_path):
    """#33 item 7: each head's manifest records the authors' logit mixing, and DIVERSED decoded with it; a paper
    run's GSM8K completions that run on into an invented next question score as the authors score them
    (`diversed score`, no decoding): right under authors (cut at "Question:", then "#### N"), wrong under standard
    (the run-on "answer is 7")."""
    from diversed.cli import main

    wd, _ = rehearsal
    heads = [json.loads(p.read_text()) for p in (wd / "results" / "heads").rglob("manifest.json")]
    assert heads and all(h["config"]["mixing"] == "logit" for h in heads)
    dynamic = [json.loads(p.read_text()) for p in (wd / "results" / "runs").rglob("dynamic*/*/manifest.json")]
    assert dynamic and all(m["decoding"]["mixing"] == "logit" for m in dynamic)
    run = tmp_path / "run"
    shutil.copytree(next((wd / "results" / "runs" / "llama" / "gsm8k" / "strict").iterdir()), run)
    rows = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    for r in rows:
        answer = r["reference"].split("####")[-1].strip()
        r["completion"] = f" He has {answer}.\n#### {answer}\n\nQuestion: Sam has 7 pens. The answer is 7"
    rewrite_generations(run, rows)  # completions the model could have written: the run stays whole
    quality = {}
    for scoring in ("authors", "standard"):
        main(["score", str(run), "--scoring", scoring])
        quality[scoring] = json.loads((run / "scores.json").read_text())["quality"]
    assert quality == {"authors": 1.0, "standard": 0.0}

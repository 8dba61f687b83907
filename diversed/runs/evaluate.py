"""Quality scoring through lm-evaluation-harness, offline.

- Two lm-eval models, each built from its `--model_args` alone (unknown names are an error naming the
  allowed ones): `diversed` decodes with our engine (`DiversedLM`); `diversed-replay` returns the
  completions a decoding run stored, matched by a hash of the prompt (`ReplayLM`), so a GPU decodes
  once and a CPU scores without decoding again.
- Each task is exported to a JSONL file with a generated lm-eval task YAML (`dataset_path: json`)
  whose `process_results` calls the task's own scorer (ROUGE via rouge-score, BLEU via sacrebleu,
  pass@1 via the sandboxed executor) and whose metric list comes from the task's `Metric`: the mean
  of per-example scores, or a corpus aggregation over the whole set. Nothing downloads a metric.
- `score_run(run_dir)` writes `scores.json` beside the run, atomically: lm-eval's aggregate and
  per-example metrics plus the run's reference-free fidelity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import tempfile
import time
from functools import cached_property
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm.auto import tqdm

from diversed.decoding.engine import Ends, Networks, generate, stop_at
from diversed.decoding.head import load_head
from diversed.decoding.models import encode_prompt, load_pair
from diversed.decoding.rng import stream_seed
from diversed.decoding.settings import Execution
from diversed.runs.run import Run, RunConfig, prompt_hash
from diversed.tasks import FIDELITY, Example, check_scoring, get_task
from diversed.tracking import decode_tracker
from diversed.utils import provenance, write_json, write_jsonl

UTILS = "from diversed.runs.evaluate import corpus_score, process_results  # noqa: F401\n"
BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
PROMPT_SET_FIELDS = ("task", "split", "n", "data_files")  # RunConfig fields that lm-eval's task decides instead
ENGINE_ARGS = {"batch_size": ("int", 1), "capture": ("str", "none"), "fastpath": ("bool", True)}  # not RunConfig's
LIVE_ARGS = (*(f.name for f in dataclasses.fields(RunConfig) if f.name not in PROMPT_SET_FIELDS), *ENGINE_ARGS)
LIVE_DEFAULTS = {"temperature": 0.0, "max_new_tokens": 256}  # lm-eval generation tasks decode greedily


def parse_model_args(arg_string: str) -> dict[str, str]:
    """`name=value,name=value` as lm-eval's --model_args spells it; values stay strings."""
    args = {}
    for item in (arg_string or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise ValueError(f"model_args must be name=value pairs separated by commas, got {item.strip()!r}")
        name, value = item.split("=", 1)
        args[name.strip()] = value.strip()
    return args


def check_model_args(model: str, args: dict, allowed: tuple[str, ...]) -> None:
    unknown = [k for k in args if k not in allowed]
    if unknown:
        raise ValueError(f"unknown model_args {', '.join(unknown)} for model {model}; allowed: {', '.join(allowed)}")


def _cast(name: str, value, kind: str):
    """A model_arg converted to its RunConfig field type ("int", "float | None", "bool", ...)."""
    text = str(value).strip()
    if "None" in kind and text.lower() in ("", "none"):
        return None
    base = kind.split("|")[0].strip()
    if base == "bool":
        if text.lower() not in BOOLS:
            raise ValueError(f"model_args {name}={text!r} is not a bool; allowed: {', '.join(BOOLS)}")
        return BOOLS[text.lower()]
    try:
        return {"int": int, "float": float, "str": str}[base](text)
    except ValueError:
        raise ValueError(f"model_args {name}={text!r} must be of type {base}") from None


def _until(gen_kwargs: dict) -> list[str]:
    """lm-eval's `until` strings of a request (decoding stops at them)."""
    until = gen_kwargs.get("until") or []
    return [until] if isinstance(until, str) else list(until)


def _cut(text: str, gen_kwargs: dict) -> str:
    """text up to the first of lm-eval's `until` strings."""
    for stop in _until(gen_kwargs):
        if stop and stop in text:
            text = text[: text.index(stop)]
    return text


class GenerationLM(LM):
    """An lm-eval model of generation tasks only, built from its model_args by `create_from_arg_obj`."""

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        return cls.create_from_arg_obj(parse_model_args(arg_string), additional_config)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{type(self).__name__} scores generation tasks (generate_until) only")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{type(self).__name__} scores generation tasks (generate_until) only")


@register_model("diversed")
class DiversedLM(GenerationLM):
    """lm-eval model `diversed`: decodes with our engine, `--model_args target=...,draft=...,verifier=fixed,
    weight=0.5` (any decoding field of RunConfig; batch_size: the requests decoded together, as lm-eval's own HF
    model, the same completions at any size; capture and fastpath: settings.Execution). The models load on the
    first request."""

    def __init__(self, cfg: RunConfig, batch_size: int = 1, execution: Execution | None = None):
        super().__init__()
        self.cfg, self.batch_size, self.execution = cfg, batch_size, execution or Execution.here()

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> DiversedLM:
        """lm-eval's --device and --batch_size (additional_config) are ignored: both are model_args here."""
        check_model_args("diversed", arg_dict, LIVE_ARGS)
        arg_dict = dict(arg_dict)
        engine = {k: _cast(k, arg_dict.pop(k, default), kind) for k, (kind, default) in ENGINE_ARGS.items()}
        if engine["batch_size"] < 1:
            raise ValueError(f"batch_size must be >= 1, got {engine['batch_size']}")
        kinds = {f.name: f.type for f in dataclasses.fields(RunConfig)}
        cfg = RunConfig(**LIVE_DEFAULTS | {k: _cast(k, v, kinds[k]) for k, v in arg_dict.items()})
        cfg.validate()
        return cls(cfg, engine["batch_size"], Execution.here(engine["capture"], engine["fastpath"]))

    @cached_property
    def pair(self):
        c = self.cfg
        return load_pair(c.target, c.draft, dtype=c.dtype, device=c.device, draft_layers=c.draft_layers)

    @cached_property
    def head(self):
        return load_head(self.cfg.head, self.pair.target, self.pair.draft) if self.cfg.verifier == "dynamic" else None

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Request i decodes from its own stream (seed, i); requests with the same token budget decode
        batch_size at a time."""

        c, pair = self.cfg, self.pair
        budgets: dict[int, list[int]] = {}
        for i, req in enumerate(requests):
            budgets.setdefault(int(req.args[1].get("max_gen_toks", c.max_new_tokens)), []).append(i)
        out: list[str | None] = [None] * len(requests)
        execution = self.execution
        with tqdm(total=len(requests), desc="generate", disable=disable_tqdm) as bar:
            for budget, indices in budgets.items():
                ids = [encode_prompt(pair.tokenizer, requests[i].args[0], chat=c.prompt_format == "chat")
                       for i in indices]
                seeds = [stream_seed(c.seed, i) for i in indices]
                decoding = dataclasses.replace(c, max_new_tokens=budget).decoding(pair.target.generation_config)
                stops = [stop_at(pair.tokenizer, _until(requests[i].args[1])) for i in indices]
                ends = Ends(stop=lambda j, tokens, stops=stops: stops[j](j, tokens), on_finish=lambda _: bar.update())
                gens = generate(Networks.of(pair, self.head), ids, decoding, seeds=seeds,
                                batch_size=self.batch_size, execution=execution, ends=ends)
                for i, gen in zip(indices, gens, strict=True):
                    text = pair.tokenizer.decode(gen.tokens, skip_special_tokens=True)
                    out[i] = _cut(text, requests[i].args[1])
        return out


@register_model("diversed-replay")
class ReplayLM(GenerationLM):
    """lm-eval model `diversed-replay`: `--model_args run=RUN_DIR` returns that run's stored completions."""

    def __init__(self, rows: list[dict]):
        """rows: generations, each with "prompt_hash" and "completion"."""
        super().__init__()
        self.completions = {r["prompt_hash"]: r["completion"] for r in rows}

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> ReplayLM:
        check_model_args("diversed-replay", arg_dict, ("run",))
        if not arg_dict.get("run"):
            raise ValueError("model diversed-replay needs model_args run=RUN_DIR (a decoding run's folder)")
        return cls(Run(arg_dict["run"]).generations)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for req in tqdm(requests, desc="replay", disable=disable_tqdm):
            context, gen_kwargs = req.args
            key = prompt_hash(context)
            if key not in self.completions:
                raise KeyError(f"replay: no stored generation for prompt {context[:60]!r} (hash {key}); "
                               "was this run decoded on the same task split?")
            out.append(_cut(self.completions[key], gen_kwargs))
        return out


# -------------------------------------------------------------------------------- lm-eval task files


def process_results(doc: dict, results: list[str]) -> dict:
    """lm-eval hook: one completion's per-example scores, and its item of the task's corpus metric."""
    task, scoring = get_task(doc["task"]), doc.get("scoring", "standard")
    example = Example(doc["id"], doc["prompt"], json.loads(doc["reference_json"]))
    scores = task.scores(results[0], example, scoring)
    if task.metric.corpus:
        scores[task.metric.name] = [task.name, task.item(results[0], example, scoring)]
    return scores


def corpus_score(items: list) -> float:
    """lm-eval aggregation of a corpus metric over [task name, corpus item] pairs (the task's `corpus_score`)."""
    return get_task(items[0][0]).corpus_score([item for _, item in items])


def write_task_files(task_name: str, examples: list[dict], folder: Path, max_gen_toks: int,
                     scoring: str = "standard") -> str:
    """Export examples as JSONL plus an lm-eval task YAML reading it, scored under `scoring` (tasks.SCORINGS);
    returns the lm-eval task name."""
    import yaml

    metric = get_task(task_name).metric
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{task_name}.jsonl"
    write_jsonl(data, [{"id": e["id"], "prompt": e["prompt"], "task": task_name,
                        "reference_json": json.dumps(e.get("reference")), "scoring": scoring} for e in examples])
    (folder / "utils.py").write_text(UTILS)
    name = f"diversed_{task_name.replace('-', '_')}"
    metrics = [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metric.per_example]
    if metric.corpus:
        metrics.insert(0, {"metric": metric.name, "aggregation": "!function utils.corpus_score",
                           "higher_is_better": True})
    if not metrics:  # lm-eval needs one metric; open-ended prompts are judged by fidelity outside lm-eval
        metrics = [{"metric": "completed", "aggregation": "mean", "higher_is_better": True}]
    config = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
              "test_split": "test", "output_type": "generate_until", "doc_to_text": "{{prompt}}",
              "doc_to_target": "", "process_results": "!function utils.process_results", "metric_list": metrics,
              "generation_kwargs": {"until": [], "max_gen_toks": max_gen_toks, "do_sample": False},
              "metadata": {"version": 1.0}}
    # YAML tags cannot be emitted by safe_dump: unquote the !function references
    text = re.sub(r"'(!function [\w.]+)'", r"\1", yaml.safe_dump(config, sort_keys=False))
    (folder / f"{name}.yaml").write_text(text)
    return name


@contextlib.contextmanager
def without_environment_report():
    """lm-eval's results without its environment report, which we do not keep (torch's collect_env lists pip and
    conda packages in subprocesses: 0.6 s a call, a call a scored run); a run's provenance is in its manifest and
    scores.json."""
    from lm_eval import evaluator

    report, evaluator.add_env_info = evaluator.add_env_info, lambda results: None
    try:
        yield
    finally:
        evaluator.add_env_info = report


def evaluate(lm: LM, task_name: str, examples: list[dict], max_gen_toks: int = 256, scoring: str = "standard") -> dict:
    """Run lm-eval offline on examples with model `lm`, scored under `scoring`; returns aggregate and per-example
    metrics."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    with tempfile.TemporaryDirectory(prefix="diversed-lm-eval-") as tmp, without_environment_report():
        name = write_task_files(task_name, examples, Path(tmp), max_gen_toks, scoring)
        tasks = TaskManager(include_path=tmp, include_defaults=False)  # our task only: indexing all is slow
        results = simple_evaluate(model=lm, tasks=[name], task_manager=tasks,
                                  log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                  torch_random_seed=0, fewshot_random_seed=0)
    aggregate = {k.split(",")[0]: v for k, v in results["results"][name].items()
                 if "," in k and not k.split(",")[0].endswith("_stderr") and isinstance(v, (int, float))}
    keys = get_task(task_name).metric.per_example
    per_example = [{"id": s["doc"]["id"], "prompt_hash": prompt_hash(s["doc"]["prompt"])} | {k: s[k] for k in keys}
                   for s in sorted(results["samples"][name], key=lambda s: s["doc_id"])]
    return {"aggregate": aggregate, "per_example": per_example}


def fidelity(rows: list[dict]) -> dict:
    """Reference-free fidelity pooled over a run's tokens: mean target log p per token and the fraction of
    tokens that are the target's own greedy choice given the same prefix."""
    lps = [x for r in rows for x in r.get("target_logprobs", [])]
    agree = [float(x) for r in rows for x in r.get("target_argmax", [])]
    return {"target_logprob": sum(lps) / len(lps) if lps else math.nan,
            "target_argmax_agreement": sum(agree) / len(agree) if agree else math.nan}


def score_run(run_dir: str | Path, scoring: str | None = None) -> Path:
    """Score a decoding run by replaying its generations through lm-eval (offline, no decoding) with the current
    scorers, under its own scoring or `scoring`; writes run_dir/scores.json."""
    if Path(run_dir).is_file():
        raise ValueError(f"{run_dir} is a file: give the run's folder ({Path(run_dir).parent})")
    run = Run(run_dir)
    manifest, rows = run.manifest, run.generations
    task_name = manifest["config"].get("task")
    scoring = scoring or manifest["config"].get("scoring", "standard")
    check_scoring(scoring)
    metric = get_task(task_name).metric if task_name else FIDELITY
    result = {"run_id": manifest["run_id"], "generations_sha256": manifest["generations_sha256"], "task": task_name,
              "fidelity": fidelity(rows), "created": time.time(), **provenance(), "metric": metric.name,
              "scoring": scoring}
    if metric.fidelity:
        result |= {"quality": result["fidelity"][metric.name], "aggregate": {},
                   "per_example": [{"id": r["id"], "prompt_hash": r["prompt_hash"]} for r in rows]}
    else:
        scored = evaluate(ReplayLM(rows), task_name, rows, max_gen_toks=manifest["config"]["max_new_tokens"],
                          scoring=scoring)
        result |= {"quality": scored["aggregate"][metric.name], **scored}
    out = run.scores_path
    write_json(out, result)
    tracker = decode_tracker(manifest["run_id"], task_name, manifest["config"].get("verifier"),
                             manifest.get("labels", {}))
    tracker.summary({"quality": result["quality"], "metric": metric.name,
                     **{f"fidelity/{k}": v for k, v in result["fidelity"].items()}})
    tracker.finish()
    return out


"""Quality scoring through lm-evaluation-harness, offline.

- `DiversedLM` is an lm-eval model (registered as `diversed`) whose `generate_until` runs our engine,
  or, in replay mode, returns the completions a decoding run stored (keyed by a hash of the prompt),
  so a GPU decodes once and a CPU scores without decoding again.
- Each task is exported to a JSONL file with a generated lm-eval task YAML (`dataset_path: json`)
  whose `process_results` calls the task's own scorer (ROUGE via rouge-score, BLEU via sacrebleu,
  pass@1 via the sandboxed executor): nothing downloads a metric.
- `score_run(run_dir)` writes `scores.json` beside the run, atomically: lm-eval's aggregate and
  per-example metrics plus the run's reference-free fidelity.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm.auto import tqdm

from diversed.runs import load_run, prompt_hash
from diversed.utils import provenance, write_json, write_jsonl

UTILS = "from diversed.evaluate import corpus_bleu, process_results  # noqa: F401\n"


def _cut(text: str, until: list[str]) -> str:
    for stop in until or []:
        if stop and stop in text:
            text = text[: text.index(stop)]
    return text


@register_model("diversed")
class DiversedLM(LM):
    """lm-eval model over the diversed engine: `--model diversed --model_args target=...,draft=...,verifier=fixed,
    weight=0.5` decodes; `replay=RUN_DIR` returns a run's stored completions instead."""

    def __init__(self, target: str = "embedded", draft: str = "embedded", verifier: str = "strict",
                 weight: float | None = None, head: str | None = None, mixing: str = "linear", K: int = 5,
                 temperature: float = 0.0, top_p: float = 1.0, max_new_tokens: int = 256, seed: int = 0,
                 dtype: str = "float32", device: str = "cpu", chat: bool = True, draft_layers: int | None = None,
                 replay: str | None = None, **_ignored):
        super().__init__()
        self.replay: dict[str, str] | None = None
        if replay:
            _, rows = load_run(replay)
            self.replay = {r["prompt_hash"]: r["completion"] for r in rows}
            return
        from diversed.models import DEFAULT_DRAFT_LAYERS
        from diversed.runs import RunConfig

        self.cfg = RunConfig(target=target, draft=draft, verifier=verifier,
                             weight=None if weight in (None, "") else float(weight), head=head or None,
                             mixing=mixing, K=int(K), temperature=float(temperature), top_p=float(top_p),
                             max_new_tokens=int(max_new_tokens), seed=int(seed), dtype=dtype, device=device,
                             chat=str(chat).lower() not in ("false", "0", "no"),
                             draft_layers=int(draft_layers or DEFAULT_DRAFT_LAYERS))
        self.cfg.validate()
        from diversed.head import load_head
        from diversed.models import load_pair

        c = self.cfg
        self.pair = load_pair(c.target, c.draft, dtype=c.dtype, device=c.device, draft_layers=c.draft_layers)
        self.head = load_head(c.head, self.pair.target, self.pair.draft) if c.verifier == "dynamic" else None

    @classmethod
    def from_completions(cls, completions: dict[str, str]) -> DiversedLM:
        """A replay model over {prompt_hash: completion}."""
        lm = cls.__new__(cls)
        LM.__init__(lm)
        lm.replay = dict(completions)
        return lm

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        args = dict(kv.split("=", 1) for kv in arg_string.split(",") if kv.strip()) if arg_string else {}
        return cls(**args)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm-eval's --device/--batch_size defaults (cuda, 1) are ignored: the device is a model_arg here."""
        return cls(**arg_dict)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for i, req in enumerate(tqdm(requests, desc="generate", disable=disable_tqdm)):
            context, gen_kwargs = req.args
            until = gen_kwargs.get("until") or []
            if isinstance(until, str):
                until = [until]
            if self.replay is not None:
                key = prompt_hash(context)
                if key not in self.replay:
                    raise KeyError(f"replay: no stored generation for prompt {context[:60]!r} (hash {key}); "
                                   "was this run decoded on the same task split?")
                out.append(_cut(self.replay[key], until))
                continue
            out.append(_cut(self._decode(context, gen_kwargs, i), until))
        return out

    def _decode(self, context: str, gen_kwargs: dict, index: int) -> str:
        import torch

        from diversed.engine import speculative_generate
        from diversed.models import encode_prompt

        c = self.cfg
        ids = encode_prompt(self.pair.tokenizer, context, chat=c.chat)
        generator = torch.Generator(device=c.device).manual_seed(c.seed * 1_000_003 + index)
        gen = speculative_generate(self.pair.target, self.pair.draft, ids, verifier=c.verifier, K=c.K,
                                   max_new_tokens=int(gen_kwargs.get("max_gen_toks", c.max_new_tokens)),
                                   temperature=c.temperature, top_p=c.top_p,
                                   weight=c.weight if c.verifier == "fixed" else None, head=self.head,
                                   mixing=c.mixing, generator=generator, vocab_size=self.pair.vocab_size)
        return self.pair.tokenizer.decode(gen.tokens, skip_special_tokens=True)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the diversed model scores generation tasks (generate_until) only")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the diversed model scores generation tasks (generate_until) only")


# -------------------------------------------------------------------------------- lm-eval task files


def process_results(doc: dict, results: list[str]) -> dict:
    """lm-eval hook: score one completion with the task's own scorer."""
    from diversed.tasks import Example, get_task

    task = get_task(doc["task"])
    example = Example(doc["id"], doc["prompt"], json.loads(doc["reference_json"]))
    scores = task.score(results[0], example)
    if doc["task"] == "wmt16-de-en":  # corpus BLEU is aggregated from (hypothesis, reference) pairs
        scores["corpus_bleu"] = (results[0].strip().split("\n")[0], example.reference)
    return scores


def corpus_bleu(items: list[tuple[str, str]]) -> float:
    """lm-eval aggregation: corpus BLEU of (hypothesis, reference) pairs (sacrebleu)."""
    import sacrebleu

    return sacrebleu.corpus_bleu([h for h, _ in items], [[r for _, r in items]]).score


def metric_names(task_name: str) -> list[str]:
    return {"gsm8k": ["accuracy"], "arith": ["accuracy"], "cnndm": ["rouge1", "rouge2", "rougeL"],
            "xsum": ["rouge1", "rouge2", "rougeL"], "mbpp": ["pass@1"], "humaneval": ["pass@1"],
            "wmt16-de-en": ["bleu", "corpus_bleu"], "open": []}[task_name]


def write_task_files(task_name: str, examples: list[dict], folder: Path, max_gen_toks: int) -> str:
    """Export examples as JSONL plus an lm-eval task YAML reading it; returns the lm-eval task name."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{task_name}.jsonl"
    write_jsonl(data, [{"id": e["id"], "prompt": e["prompt"], "task": task_name,
                        "reference_json": json.dumps(e.get("reference"))} for e in examples])
    (folder / "utils.py").write_text(UTILS)
    name = f"diversed_{task_name.replace('-', '_')}"
    metrics = [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metric_names(task_name)]
    for m in metrics:
        if m["metric"] == "corpus_bleu":
            m["aggregation"] = "!function utils.corpus_bleu"
    if not metrics:  # lm-eval needs one metric; open-ended prompts are judged by fidelity outside lm-eval
        metrics = [{"metric": "completed", "aggregation": "mean", "higher_is_better": True}]
    config = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
              "test_split": "test", "output_type": "generate_until", "doc_to_text": "{{prompt}}",
              "doc_to_target": "", "process_results": "!function utils.process_results", "metric_list": metrics,
              "generation_kwargs": {"until": [], "max_gen_toks": max_gen_toks, "do_sample": False},
              "metadata": {"version": 1.0}}
    text = yaml.safe_dump(config, sort_keys=False)
    # YAML tags cannot be emitted by safe_dump: unquote the !function references
    text = text.replace("'!function utils.process_results'", "!function utils.process_results")
    text = text.replace("'!function utils.corpus_bleu'", "!function utils.corpus_bleu")
    (folder / f"{name}.yaml").write_text(text)
    return name


def evaluate(lm: LM, task_name: str, examples: list[dict], max_gen_toks: int = 256) -> dict:
    """Run lm-eval offline on examples with model `lm`; returns aggregate and per-example metrics."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    with tempfile.TemporaryDirectory(prefix="diversed-lm-eval-") as tmp:
        name = write_task_files(task_name, examples, Path(tmp), max_gen_toks)
        tasks = TaskManager(include_path=tmp, include_defaults=False)  # our task only: indexing all is slow
        results = simple_evaluate(model=lm, tasks=[name], task_manager=tasks,
                                  log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                  torch_random_seed=0, fewshot_random_seed=0)
    aggregate = {k.split(",")[0]: v for k, v in results["results"][name].items()
                 if "," in k and not k.split(",")[0].endswith("_stderr") and isinstance(v, (int, float))}
    per_example = []
    for s in sorted(results["samples"][name], key=lambda s: s["doc_id"]):
        row = {"id": s["doc"]["id"], "prompt_hash": prompt_hash(s["doc"]["prompt"])}
        for m in metric_names(task_name):
            if m in s and m != "corpus_bleu":
                row[m] = s[m]
        per_example.append(row)
    return {"aggregate": aggregate, "per_example": per_example}


def fidelity(rows: list[dict]) -> dict:
    """Reference-free fidelity pooled over a run's tokens: mean target log p per token and the fraction of
    tokens that are the target's own greedy choice given the same prefix."""
    lps = [x for r in rows for x in r.get("target_logprobs", [])]
    agree = [float(x) for r in rows for x in r.get("target_argmax", [])]
    return {"target_logprob": sum(lps) / len(lps) if lps else math.nan,
            "target_argmax_agreement": sum(agree) / len(agree) if agree else math.nan}


def score_run(run_dir: str | Path) -> Path:
    """Score a decoding run by replaying its generations through lm-eval; writes run_dir/scores.json."""
    run_dir = Path(run_dir)
    manifest, rows = load_run(run_dir)
    task_name = manifest["config"].get("task")
    result = {"run_id": manifest["run_id"], "task": task_name, "fidelity": fidelity(rows), "created": time.time(),
              **provenance()}
    if task_name and metric_names(task_name):
        from diversed.tasks import get_task

        lm = DiversedLM(replay=str(run_dir))
        scored = evaluate(lm, task_name, rows, max_gen_toks=manifest["config"]["max_new_tokens"])
        task = get_task(task_name)
        result |= {"metric": task.metric, "quality": scored["aggregate"].get(task.metric), **scored}
    else:
        result |= {"metric": "target_logprob", "quality": result["fidelity"]["target_logprob"],
                   "aggregate": {}, "per_example": [{"id": r["id"], "prompt_hash": r["prompt_hash"]} for r in rows]}
    out = run_dir / "scores.json"
    write_json(out, result)
    return out


def read_scores(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "scores.json"
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is corrupt: {e}") from e



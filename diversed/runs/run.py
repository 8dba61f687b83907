"""A decoding run: a resolved config x a prompt set -> {out}/{run_id}/generations.jsonl + manifest.json.

`execute` builds the run directory in a temp folder and renames it into place when complete, with the manifest
as its last file, so a crash never leaves a run that looks finished; `Run` reads one (every other module reads
run folders through it).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import statistics
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from diversed.decoding.engine import Ends, Networks, check_request, generate, stop_at, synchronize
from diversed.decoding.fastpath import pooled_decoders
from diversed.decoding.head import MODULES, load_head
from diversed.decoding.models import encode_prompt, load_pair
from diversed.decoding.rng import stream_seed
from diversed.decoding.settings import ALONE, DEFERRAL, TRAINED, Decoding, Execution, trained_module
from diversed.decoding.stats import Generation, position_counts, summarize
from diversed.runs.settings import PROMPT_FIELDS, Launch, RunConfig
from diversed.tasks import get_task
from diversed.tracking import decode_tracker
from diversed.utils import (
    RUN_OWNER,
    atomic_dir,
    check_output,
    check_writable,
    code_hash,
    config_hash,
    field_type,
    finite,
    hardware_label,
    link_or_copy,
    provenance,
    read_json,
    read_jsonl,
    sha256_file,
    stop_if_interrupted,
    write_json,
    write_text,
)

DETERMINISTIC_STATS = ("new_tokens", "steps", "stop", "draft_acceptance_rate", "mean_acceptance_length",
                       "mean_weight", "bias_tv", "kl", "target_logprob", "target_argmax_agreement")


def task_prompts(cfg: RunConfig) -> list[dict]:
    """Prompt rows (with references) of the configured task split, in its prompt format."""
    task = get_task(cfg.task, cfg.data_files)
    return [{**ex.row(), "task": cfg.task} for ex in task.examples(cfg.split, cfg.n, seed=0,
                                                                   prompt_format=cfg.prompt_format)]


def load_prompts(path: str | Path) -> list[dict]:
    """Prompt rows from JSONL: each needs a non-empty "prompt"; "id" defaults to the line number."""
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path} holds no prompts")
    for i, row in enumerate(rows):
        text = row.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}: prompt {i + 1} has no non-empty \"prompt\" field")
        row["id"] = str(row.get("id", i))
    check_prompts(rows, str(path))
    return rows


def check_prompts(prompts: list[dict], where: str = "the prompts") -> None:
    """Raise unless every prompt row has a non-empty prompt and its own id (a run's rows are matched by id)."""
    if not prompts:
        raise ValueError(f"no prompts to decode in {where}")
    seen: dict[str, int] = {}
    for i, row in enumerate(prompts, 1):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"prompt {i} is empty")
        if (rid := str(row.get("id", i - 1))) in seen:
            raise ValueError(f"{where}: prompts {seen[rid]} and {i} have the same id {rid!r}; each prompt needs its "
                             "own")
        seen[rid] = i


def prompt_hash(text: str) -> str:
    """Key of a prompt in stored generations (replay scoring matches on it)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_id(cfg: RunConfig, prompts: list[dict]) -> str:
    resolved = dataclasses.asdict(cfg) | {"prompts": [prompt_hash(p["prompt"]) for p in prompts]}
    return config_hash(resolved)


@dataclass
class PreparedRun:
    """One run's config resolved against its models, ready to decode any of its prompts (prompt i from its own
    stream (seed, i): the same random numbers at any batch size and in any order, so the same tokens up to the float
    rounding a batch size brings)."""

    cfg: RunConfig
    prompts: list[dict]
    run_id: str
    pair: typing.Any  # models.Pair
    head: typing.Any  # head.WeightHead (dynamic), head.Judge (judge) or None
    encoded: list[list[int]]
    decoding: Decoding
    execution: Execution

    @classmethod
    def prepare(cls, cfg: RunConfig, prompts: list[dict], models: dict | None = None,
                execution: Execution | None = None) -> PreparedRun:
        """Every check, then the models (shared through `models`, models.load_pair's cache) and the prompts'
        token ids; execution: how the engine runs (default Execution.here())."""
        cfg.validate()
        execution = execution or Execution.here()
        check_prompts(prompts)
        pair = load_pair(cfg.target, cfg.draft, dtype=cfg.dtype, device=cfg.device, draft_layers=cfg.draft_layers,
                         cache=models)
        needs = trained_module(cfg.verifier)
        head = load_head(getattr(cfg, needs), pair.target, pair.draft, MODULES[needs]) if needs else None
        decoding = cfg.decoding(pair.target.generation_config)
        encoded = [encode_prompt(pair.tokenizer, row["prompt"], chat=cfg.prompt_format == "chat") for row in prompts]
        check_request(Networks.of(pair, head), max(len(ids) for ids in encoded), decoding, execution)
        return cls(cfg, prompts, run_id(cfg, prompts), pair, head, encoded, decoding, execution)

    def __call__(self, indices: list[int], batch_size: int = 1, on_finish=None,
                 decoding: Decoding | None = None) -> list[Generation]:
        """The prompts `indices`, batch_size at a time (decoding: other settings, e.g. a warm-up's budget)."""
        seeds = [stream_seed(self.cfg.seed, i) for i in indices]
        cfg = self.cfg  # stop decoding at the markers the authors' scoring cuts at, unless the decode runs on as theirs
        stops = get_task(cfg.task).stops if cfg.task and cfg.scoring == "authors" and cfg.stop == "markers" else ()
        ends = Ends(stop=stop_at(self.pair.tokenizer, stops) if stops else None, on_finish=on_finish)
        return generate(Networks.of(self.pair, self.head), [self.encoded[i] for i in indices],
                        decoding or self.decoding, seeds=seeds, batch_size=batch_size, execution=self.execution,
                        ends=ends)

    def warm_up(self) -> float:
        """Before a timed decode: a short decode of the first prompt (allocations and kernel choice), then every
        captured step (CUDA graphs, compiled steps) any of its prompts will run, so that no method pays a capture
        inside a timed prompt. Returns its seconds (recorded apart from the timings)."""
        t0 = time.perf_counter()
        short = dataclasses.replace(self.decoding, max_new_tokens=min(8, self.cfg.max_new_tokens))
        self([0], decoding=short)
        live = max(len(ids) for ids in self.encoded) + self.cfg.max_new_tokens + self.cfg.K + 1
        for model in (self.pair.target, self.pair.draft):
            for decoder in pooled_decoders(model):
                decoder.precapture(live)
        synchronize(self.pair.target.get_output_embeddings().weight.device)
        return time.perf_counter() - t0

    def write(self, gens: list[Generation], run_dir: Path, labels: dict, batch_size: int, started: float,
              warmup: float | None = None) -> Path:
        """The run folder: generations.jsonl, then manifest.json (renamed into place when complete), and its W&B
        entry. Only a batch of one times its prompts (prompt_seconds, tokens/s)."""
        cfg, rid = self.cfg, self.run_id
        rows = []
        for row, ids, gen in zip(self.prompts, self.encoded, gens, strict=True):
            rows.append({"id": row["id"], "prompt": row["prompt"], "prompt_hash": prompt_hash(row["prompt"]),
                         **({"task": row["task"], "reference": row["reference"]} if "task" in row else {}),
                         "completion": self.pair.tokenizer.decode(gen.tokens, skip_special_tokens=True),
                         "tokens": gen.tokens, "prompt_tokens": len(ids), "drafted": gen.drafted,
                         "accepted": gen.accepted, "weights": gen.weights, "bias_tv_per_token": gen.bias_tv,
                         "kl_per_token": gen.kl,
                         "tv_pq_per_position": gen.tv_pq,
                         "target_logprobs": gen.target_logprob, "target_argmax": gen.target_argmax,
                         # timings live in the manifest only, so generations.jsonl is byte-identical on a rerun
                         **{k: v for k, v in gen.stats().items() if k in DETERMINISTIC_STATS}})
        summary = summarize(gens)
        timed = batch_size == 1
        if not timed:  # a batch's wall clock is shared by its rows: no tokens/s
            summary |= {k: None for k in ("tokens_per_s", "time_total", "time_draft", "time_verify", "time_prefill")}
        text = "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows)
        manifest = {"run_id": rid, "config": dataclasses.asdict(cfg), "decoding": self.decoding.manifest(),
                    "generations_sha256": hashlib.sha256(text.encode()).hexdigest(), "prompts": len(rows),
                    "trained": trained_hashes(cfg),
                    "labels": labels, "seed": cfg.seed, "batch_size": batch_size,
                    "execution": dataclasses.asdict(self.execution), "summary": summary, "started": started,
                    # per prompt, in the order of generations.jsonl; only a batch of one times its prompts:
                    # its decode steps, and its prefill apart
                    "prompt_seconds": [g.time_total for g in gens] if timed else None,
                    "prefill_seconds": [g.time_prefill for g in gens] if timed else None,
                    "first_token_seconds": [g.time_first for g in gens] if timed else None,  # after the prefill
                    "warmup_seconds": warmup,  # the warm-up and captures before a timed decode (PreparedRun.warm_up)
                    "finished": time.time(), "code": code_hash(), **provenance()}
        tracker = decode_tracker(rid, cfg.task, cfg.verifier, labels,
                                 config=dataclasses.asdict(cfg) | {"run_id": rid, **labels})
        tracker.log({k: v for k, v in summary.items() if isinstance(v, (int, float))})
        tracker.table("generations", ["id", "prompt", "completion"],
                      [[r["id"], r["prompt"][:1000], r["completion"][:1000]] for r in rows[:20]])
        tracker.finish()
        with atomic_dir(run_dir, RUN_OWNER) as tmp:
            write_text(tmp / "generations.jsonl", text)
            write_json(tmp / "manifest.json", manifest)  # last: its presence marks a complete run
        return run_dir


def copy_run(source: Path, run_dir: str | Path, labels: dict) -> Path:
    """The run at `source` written again at run_dir under other labels: the same run_id (config and prompts), so
    the same tokens and timings; its manifest names the source (`copied_from`). Its W&B run is the source's
    (decode-{run_id})."""
    manifest = _read_json(Path(source) / "manifest.json") | {"labels": labels, "copied_from": str(source)}
    print(f"run {manifest['run_id']}: {run_dir} is {source} (the same config), copied")
    with atomic_dir(Path(run_dir), RUN_OWNER) as tmp:
        link_or_copy(Path(source) / "generations.jsonl", tmp / "generations.jsonl")
        write_json(tmp / "manifest.json", manifest)  # last: its presence marks a complete run
    return Path(run_dir)


def keep_run(run_dir: str | Path, keep: str | Path) -> Path:
    """A finished run's files hard-linked (copied where links cannot be made) into keep/{run_id}: a failed
    workflow job deletes its outputs, these links survive, and its rerun takes them back (restore_run)."""
    run_dir = Path(run_dir)
    rid = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    with atomic_dir(Path(keep) / rid, RUN_OWNER) as tmp:
        for name in ("generations.jsonl", "manifest.json"):
            link_or_copy(run_dir / name, tmp / name)
    return Path(keep) / rid


def restore_run(rid: str, run_dir: str | Path, labels: dict, keep: str | Path) -> bool:
    """Put the kept run `rid` at run_dir if the same code decoded it with the same labels and it is whole (Run.check);
    True if it did (a run_id already fixes the config and the prompts, and a prompt's draws do not depend on the
    batch size). A damaged kept run is not taken: it is said, and the run decoded again."""
    kept = Run(Path(keep) / rid)
    try:
        manifest = kept.manifest
    except (OSError, ValueError):
        return False
    if (manifest.get("run_id"), manifest.get("labels"), manifest.get("code")) != (rid, labels, code_hash()):
        return False
    try:
        kept.check()
    except (OSError, ValueError) as e:
        print(f"warning: not taking the kept run {kept.path}: {e}", file=sys.stderr)
        return False
    with atomic_dir(run_dir, RUN_OWNER) as tmp:
        for name in ("generations.jsonl", "manifest.json"):  # the manifest last: it marks a complete run
            link_or_copy(kept.path / name, tmp / name)
    return True


def execute(cfg: RunConfig, prompts: list[dict], out: str | Path = "results/runs", *, run_dir: str | Path | None = None,
            labels: dict | None = None, launch: Launch | None = None, keep: str | Path | None = None) -> Path:
    """Decode every prompt into out/{run_id} (or exactly run_dir); returns the run directory.

    All checks happen before the first decode; one short warm-up decode precedes a timed (batch 1) run.
    launch (runs.settings.Launch): launch.batch_size prompts decoded together in lockstep (each prompt's tokens are
    those of a batch of one; only a batch of one times its prompts: a batched run's manifest has no
    prompt_seconds), the execution settings (default Execution.here()), progress bars, and the models and
    tokenizers the runs of one process share. labels (pair name, experiment, ...), the batch size and the
    execution settings are stored in the manifest and do not enter the run_id. keep: a folder where each finished
    run is kept (keep_run) and from which a run already decoded is taken instead of decoded again (restore_run).
    """
    labels, launch = dict(labels or {}), launch or Launch()
    batch_size = launch.batch_size
    cfg.validate()
    check_prompts(prompts)
    rid = run_id(cfg, prompts)
    target = Path(run_dir) if run_dir is not None else Path(out) / rid
    check_output(target, RUN_OWNER)  # before any model loads
    if keep is not None:
        check_output(Path(keep) / rid, RUN_OWNER)
        if restore_run(rid, target, labels, keep):
            print(f"run {rid}: taken from {Path(keep) / rid} (decoded before by the same code)")
            return target
    prepared = PreparedRun.prepare(cfg, prompts, launch.models, launch.execution)
    warmup = prepared.warm_up() if batch_size == 1 else None  # only a batch of one is timed: after a warm-up
    started = time.time()
    with tqdm(total=len(prompts), desc=f"decode {prepared.run_id} (batch {batch_size})", unit="prompt",
              disable=not launch.progress) as bar:
        def finished(_: int) -> None:
            stop_if_interrupted()
            bar.update()

        gens = prepared(list(range(len(prompts))), batch_size, on_finish=finished)
    run_dir = prepared.write(gens, target, labels, batch_size, started, warmup)
    if keep is not None:
        keep_run(run_dir, keep)
    return run_dir


def run_configs(base: RunConfig, specs: list[RunSpec]) -> list[RunConfig]:
    """The runs of one setting: base with each spec's changes, every one checked, no two writing one folder."""
    configs = [dataclasses.replace(base, **spec.changes) for spec in specs]
    for cfg, spec in zip(configs, specs, strict=True):
        cfg.validate()
        check_output(spec.run_dir, RUN_OWNER)
    if len({spec.run_dir.resolve() for spec in specs}) != len(specs):
        raise ValueError("two runs of a batch write the same folder")
    return configs


def execute_interleaved(base: RunConfig, prompts: list[dict], specs: list[RunSpec], *, labels: dict | None = None,
                        progress: bool = True, execution: Execution | None = None) -> list[Path]:
    """Timing runs: the runs of one setting on the same prompts, at batch 1, interleaved prompt by prompt (prompt
    1 with every run, then prompt 2, ...), so that a drift of the machine's speed falls on every run alike. Run i
    is base with specs[i].changes, written to specs[i].run_dir; the models load once, and runs of one config (one
    run_id, e.g. a fixed w = 1 and strict) decode and are timed once (copy_run)."""
    configs = run_configs(base, specs)
    check_prompts(prompts)
    ids = [run_id(cfg, prompts) for cfg in configs]
    models: dict = {}
    prepared = {rid: PreparedRun.prepare(cfg, prompts, models, execution)
                for rid, cfg in dict(zip(ids, configs, strict=True)).items()}  # each distinct run once
    warmup = {rid: run.warm_up() for rid, run in prepared.items()}  # every method's captures before any clock
    started, gens = time.time(), {rid: [] for rid in prepared}
    for i in tqdm(range(len(prompts)), desc="timing (interleaved)", unit="prompt", disable=not progress):
        for rid, run in prepared.items():
            gens[rid] += run([i])
    first: dict[str, Path] = {}
    return [copy_run(first[rid], spec.run_dir, (labels or {}) | spec.labels) if rid in first else
            first.setdefault(rid, prepared[rid].write(gens[rid], spec.run_dir, (labels or {}) | spec.labels, 1,
                                                      started, warmup[rid]))
            for rid, spec in zip(ids, specs, strict=True)]


@dataclass
class RunSpec:
    """One run of a batch: where it is written, what it changes in the batch's shared config, its own labels."""

    run_dir: Path
    changes: dict = dataclasses.field(default_factory=dict)
    labels: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, tokens: list[str]) -> RunSpec:
        """From the command line: DIR, then KEY=VALUE for a RunConfig field, weight_file=CHOICE.json (w and mixing
        from a sweep's choice) or label:KEY=VALUE (e.g. DIR verifier=fixed K=5 weight_file=choice.json)."""
        if not tokens or "=" in tokens[0]:
            raise ValueError(f"a run is DIR followed by KEY=VALUE items, got {' '.join(tokens) or 'nothing'!r}")
        spec, hints, weight_file = cls(Path(tokens[0])), typing.get_type_hints(RunConfig), None
        for item in tokens[1:]:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"run {tokens[0]}: {item!r} is not KEY=VALUE")
            if key.startswith("label:"):
                spec.labels[key.removeprefix("label:")] = value
            elif key == "weight_file":
                weight_file = value
            elif key in hints and key not in PROMPT_FIELDS:
                try:
                    spec.changes[key] = parse_value(hints[key], value)
                except ValueError as e:
                    raise ValueError(f"run {tokens[0]}: {item}: {e}") from None
            else:
                allowed = sorted(set(hints) - set(PROMPT_FIELDS)) + ["weight_file", "label:KEY"]
                raise ValueError(f"run {tokens[0]}: unknown key {key!r}; allowed: {', '.join(allowed)}")
        if weight_file:
            spec.changes = with_weight_file(spec.changes, weight_file)
        return spec


def parse_value(hint, text: str):
    """A command-line value as the RunConfig field's type (None for `none` where the field allows it)."""
    kind = field_type(hint)
    if text.lower() == "none" and type(None) in typing.get_args(hint):
        return None
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{text!r} is not true or false")
        return text.lower() == "true"
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{text!r} is not {'an integer' if kind is int else 'a number' if kind is float else kind}") \
            from None
    finite("value", value)
    return value


def trained(run: Run) -> list[dict]:
    """The training manifests behind a run: its head's (kind "head"), its AutoJudge classifier's (kind "judge") and
    its fine-tuned draft's (kind "draft"), each with its folder (path)."""
    c = run.config
    paths = [(kind, Path(c[kind]).parent / "manifest.json") for kind in TRAINED if c.get(kind)]
    paths.append(("draft", Path(c["draft"]) / "distill_manifest.json"))
    return [json.loads(p.read_text()) | {"kind": kind, "path": str(p.parent)} for kind, p in paths if p.is_file()]


def trained_hashes(cfg: RunConfig) -> dict:
    """The sha256 of each trained file a run decoded with (its head's or judge's file, a fine-tuned draft's
    weights, as its manifest recorded them), recorded in the run's manifest."""
    out = {kind: sha256_file(getattr(cfg, kind)) for kind in TRAINED if getattr(cfg, kind, None)}
    distilled = Path(cfg.draft) / "distill_manifest.json"
    if distilled.is_file():
        out["draft"] = json.loads(distilled.read_text()).get("weights_sha256")
    return out


def with_weight_file(changes: dict, path: str | Path) -> dict:
    """changes with the verifier's setting from a sweep's choice.json: w and mixing for the fixed verifier, knob
    (and cascade's deferral) for another family (settings.RULES); a verifier whose sweep kept strict is the strict
    verifier (said on stderr). changes may not set what the file sets."""
    choice, verifier = read_json(path), changes.get("verifier", "fixed")
    sets = ("weight", "mixing") if verifier in ("fixed", "strict") else ("knob", "deferral")
    if given := [k for k in sets if changes.get(k) not in (None, Decoding.__dataclass_fields__[k].default)]:
        raise ValueError(f"--weight-file {path} sets {' and '.join(sets)}: give it or --{given[0]}, not both")
    try:
        if verifier not in ("fixed", "strict"):
            family = (choice.get("families") or {}).get(verifier)
            if family is None:
                raise ValueError(f"{path} holds no choice for the {verifier!r} verifier (its sweep did not sweep it)")
            if family["verifier"] == "strict":
                print(f"note: the sweep in {path} kept strict for {verifier} (no relaxed knob admitted): decoding "
                      "strict", file=sys.stderr)
                return changes | {"verifier": "strict", "knob": None, "deferral": DEFERRAL, "judge": None}
            return changes | {"knob": float(family["knob"]), "deferral": family.get("deferral") or DEFERRAL}
        if float(choice["weight"]) == 1.0:
            if verifier == "fixed":
                print(f"note: the sweep in {path} kept strict (w = 1): decoding strict", file=sys.stderr)
            return changes | {"weight": None, "mixing": "linear"} | (
                {"verifier": "strict"} if verifier == "fixed" else {})
        return changes | {"weight": float(choice["weight"]), "mixing": choice["mixing"]}
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path} is not a sweep's choice.json (no {e} where a choice has one)") from None


def execute_all(base: RunConfig, prompts: list[dict], specs: list[RunSpec], *, labels: dict | None = None,
                launch: Launch | None = None, keep: str | Path | None = None) -> list[Path]:
    """The runs of one setting in one process, one after another on the same prompts and hardware: run i is
    base with specs[i].changes, written to specs[i].run_dir. Every config is checked before the first decode,
    each (target, draft) loads once, and runs of one config (one run_id) decode once (copy_run); launch and
    keep as in execute."""
    configs, launch = run_configs(base, specs), launch or Launch()
    check_prompts(prompts)
    first: dict[str, Path] = {}  # run_id -> the folder that decoded it
    out = []
    for cfg, spec in zip(configs, specs, strict=True):
        rid, run_labels = run_id(cfg, prompts), (labels or {}) | spec.labels
        if rid in first:
            out.append(copy_run(first[rid], spec.run_dir, run_labels))
        else:
            first[rid] = execute(cfg, prompts, run_dir=spec.run_dir, labels=run_labels, launch=launch, keep=keep)
            out.append(first[rid])
    return out


JOB_FORMAT = "diversed decoding job"  # a job manifest's format field: what check_job may replace


def check_job(path: str | Path) -> None:
    """Raise (before any compute) unless a job manifest may be written at `path`: absent, or one diversed wrote."""
    path = Path(path)
    check_writable(path)
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise ValueError(f"--job {path} is a folder, not a file")
    if path.exists():
        try:
            ours = read_json(path).get("format") == JOB_FORMAT
        except (ValueError, AttributeError):
            ours = False
        if not ours:
            raise ValueError(f"refusing to replace {path}: it is not a job manifest diversed wrote")


def write_job(path: str | Path, run_dirs: list[Path]) -> None:
    """A decoding job's manifest (generate --job), written once every run is decoded (and scored, where it was):
    each run's folder, id and generations hash. The workflow's one output of a decoding job."""
    runs = [{"dir": str(d), "run_id": (m := Run(d).manifest)["run_id"], "generations_sha256": m["generations_sha256"],
             "scored": (Path(d) / "scores.json").is_file()} for d in run_dirs]
    write_json(path, {"format": JOB_FORMAT, "runs": runs})


@dataclass(frozen=True)
class Run:
    """A run folder as `execute` writes it, and everything read from it.

    manifest.json: config, labels, pooled summary, per-prompt seconds, provenance (written last: its presence
    marks a complete run); generations.jsonl: one row per prompt; scores.json: the lm-eval scores, once scored
    (diversed.runs.evaluate)."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def scores_path(self) -> Path:
        return self.path / "scores.json"

    @functools.cached_property
    def manifest(self) -> dict:
        if not self.manifest_path.is_file():
            raise FileNotFoundError(f"{self.path} is not a complete run (no manifest.json)")
        return _read_json(self.manifest_path)

    @functools.cached_property
    def generations(self) -> list[dict]:
        """The rows of generations.jsonl, once check() has shown them to be the ones the manifest recorded."""
        return self.check()

    def check(self) -> list[dict]:
        """The run's rows, or ValueError naming both files where generations.jsonl is not what manifest.json
        recorded: its sha256 (written with it), the count and ids of its rows, and the run id recomputed from the
        manifest's config and the rows' prompts (an edited manifest or another run's rows)."""
        manifest, path = self.manifest, self.path / "generations.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{self.path} is not a complete run (no generations.jsonl)")
        recorded = manifest.get("generations_sha256")
        if recorded is None:
            raise ValueError(f"{self.manifest_path} records no hash of {path.name} (written by an older diversed): "
                             "decode the run again")
        if sha256_file(path) != recorded:
            raise ValueError(f"{path} is not the file {self.manifest_path} recorded (its sha256 differs: edited, "
                             "cut short or another run's); decode the run again")
        rows = read_jsonl(path)
        ids = [str(r.get("id")) for r in rows]
        if len(rows) != manifest.get("prompts") or len(set(ids)) != len(ids):
            raise ValueError(f"{path} holds {len(rows)} rows ({len(set(ids))} ids), {self.manifest_path} records "
                             f"{manifest.get('prompts')} prompts")
        try:
            rid = config_hash(manifest["config"] | {"prompts": [prompt_hash(r["prompt"]) for r in rows]})
        except (KeyError, TypeError) as e:
            raise ValueError(f"{self.manifest_path} or {path} lacks a field a run records ({e})") from None
        if rid != manifest.get("run_id"):
            raise ValueError(f"{self.manifest_path}: its config and the prompts of {path} give run id {rid}, not "
                             f"the {manifest.get('run_id')} it records (the manifest or the rows were edited)")
        return rows

    @functools.cached_property
    def scores(self) -> dict:
        """scores.json, once shown to score this run's generations (its run id and the generations' hash)."""
        if not self.scores_path.is_file():
            raise FileNotFoundError(f"{self.path} is not scored yet (no scores.json): run `diversed score {self.path}`")
        scores = _read_json(self.scores_path)
        recorded = (scores.get("run_id"), scores.get("generations_sha256"))
        if recorded != (self.manifest["run_id"], self.manifest.get("generations_sha256")):
            raise ValueError(f"{self.scores_path} scored other generations than {self.manifest_path} records: "
                             f"score the run again (`diversed score {self.path}`)")
        return scores

    @property
    def config(self) -> dict:
        return self.manifest["config"]

    @property
    def labels(self) -> dict:
        return self.manifest.get("labels", {})

    @property
    def batch_size(self) -> int:
        """The prompts decoded together (1: timed prompt by prompt)."""
        return self.manifest.get("batch_size", 1)

    @property
    def method(self) -> str:
        """What the tables call it: the workflow's label (e.g. finetuned, a strict run), else the verifier."""
        return self.labels.get("method", self.config["verifier"])

    def holds(self, rid: str) -> bool:
        """Whether this folder holds the finished, scored run rid."""
        try:
            return self.manifest["run_id"] == rid and bool(self.scores) and bool(self.check())
        except (OSError, ValueError, KeyError):
            return False

    def row(self) -> dict:
        """One tidy row: the run's labels and config, its pooled summary, its scores."""
        c, s, labels, scores = self.config, self.manifest["summary"], self.labels, self.scores
        sampling = self.manifest.get("decoding", {}).get("sampling", {})  # the filters applied (sampling: model)
        return {
            "experiment": labels.get("experiment", "diversed"),
            "pair": labels.get("pair", f"{c['target']}|{c['draft']}"), "task": labels.get("task", c.get("task")),
            "split": c.get("split", "eval"), "method": self.method, "head_task": labels.get("head_task"),
            "timing": labels.get("timing") == "1",  # a timing run (batch 1, interleaved), not a quality run
            "verifier": c["verifier"], "temperature": c["temperature"],
            "K": None if c["verifier"] in ALONE else c["K"], "seed": c["seed"], "target": c["target"],
            "draft": c["draft"], "weight": 1.0 if c["verifier"] == "strict" else c.get("weight"), "mixing": c["mixing"],
            "knob": c.get("knob"), "deferral": c.get("deferral", DEFERRAL) if c["verifier"] == "cascade" else None,
            "head": c.get("head"), "sampling": c.get("sampling", "full"),
            "top_k": sampling.get("top_k", c.get("top_k")), "top_p": sampling.get("top_p", c.get("top_p")),
            "prompt_format": c.get("prompt_format", "chat"),
            "max_new_tokens": c.get("max_new_tokens"),
            "prompts": s["prompts"], "new_tokens": s["new_tokens"],
            "draft_acceptance_rate": s["draft_acceptance_rate"], "mean_acceptance_length": s["mean_acceptance_length"],
            "acceptance_by_position": json.dumps(s["acceptance_by_position"]), "mean_weight": s["mean_weight"],
            "bias_tv": s["bias_tv"], "kl": s.get("kl", math.nan), "tokens_per_s": s["tokens_per_s"],
            "batch_size": self.batch_size,
            "seconds_per_sample": math.nan if s["time_total"] is None else s["time_total"] / max(s["prompts"], 1),
            "hardware": hardware_label(self.manifest.get("hardware"), c.get("device", "cpu")),
            "device": c.get("device", "cpu"),
            "capture": self.manifest.get("execution", {}).get("capture", "none"),  # how its steps ran (timing)
            "metric": scores["metric"], "quality": scores["quality"], "scoring": scores.get("scoring", "standard"),
            "stop": c.get("stop", "markers"),
            "target_logprob": scores["fidelity"]["target_logprob"],
            "target_argmax_agreement": scores["fidelity"]["target_argmax_agreement"],
            "run_id": self.manifest["run_id"], "run_dir": str(self.path),
        }

    def prompt_rows(self) -> list[dict]:
        """One row per prompt: the run_id, seed and prompt hash, and the per-prompt values the statistics pool
        (diversed.analysis.statistics.METRICS): sums over the prompt's tokens and steps, its quality (a task
        metric per example; nan for a corpus or fidelity metric), its decode seconds (manifest prompt_seconds) and
        its prefill's (prefill_seconds) and its first token's after the prefill (first_token_seconds)."""
        metric = self.scores["metric"]
        quality = {e["prompt_hash"]: e.get(metric) for e in self.scores.get("per_example", [])}
        seconds = self.manifest.get("prompt_seconds") or [math.nan] * len(self.generations)
        prefill = self.manifest.get("prefill_seconds") or [math.nan] * len(self.generations)
        first = self.manifest.get("first_token_seconds") or [math.nan] * len(self.generations)
        rows, exact = [], self.config["verifier"] == "autoregressive"  # the target alone: no bias by definition
        for g, sec, pre, first_s in zip(self.generations, seconds, prefill, first, strict=True):
            weights, n = [w for step in g.get("weights") or [] for w in step], len(g["tokens"])
            counts = position_counts(g.get("drafted", []), g.get("accepted", []), self.config.get("K") or 0)
            rows.append({
                "run_id": self.manifest["run_id"], "seed": self.config["seed"], "prompt": g["prompt_hash"],
                "accepted": sum(g.get("accepted", [])), "drafted": sum(g.get("drafted", [])),
                "new_tokens": n, "length": n, "steps": g.get("steps", len(g.get("drafted", [])) or len(g["tokens"])),
                "seconds": sec, "prefill_seconds": pre, "first_token_seconds": first_s, "weight_sum": sum(weights),
                "bias_tv_sum": 0.0 if exact else token_sum(g.get("bias_tv_per_token"), n),
                "kl_sum": 0.0 if exact else token_sum(g.get("kl_per_token"), n),
                "target_logprob_sum": token_sum(g.get("target_logprobs"), n),
                "target_argmax_sum": token_sum(g.get("target_argmax"), n),
                "quality": _number(quality.get(g["prompt_hash"])),
                "weight_sd": statistics.pstdev(weights) if weights else math.nan,
                "identity_gap": identity_gap(g, self.config["mixing"]),
                "front_gap": front_gap(g),
                "front_gap_zero": front_gap(g, biased=False),
                # per draft position i: steps accepting i, steps reaching i (the per-position intervals)
                "position_accepted": json.dumps([hit for hit, _ in counts]),
                "position_reached": json.dumps([reached for _, reached in counts]),
            })
        return rows


def token_sum(values: list | None, n: int) -> float:
    """The sum of a per-token record of n tokens; nan when it is absent or not one value a token (an unrecorded
    fidelity is no value, not a perfect 0 nats)."""
    return math.fsum(map(float, values)) if values is not None and len(values) == n else math.nan


def identity_gap(row: dict, mixing: str) -> float:
    """Observed minus predicted acceptance over the positions a prompt tested (the accepted ones and the first
    rejected), where linear mixing predicts P(accept) = 1 - w TV(p, q) = 1 - w / (1 - w) TV(nu, p) (its emitted
    token's bias); nan for strict positions (w = 1), other mixings, verifiers that record no w (a family that does
    not mix) and prompts without a tested position."""
    if mixing != "linear" or not any(row.get("weights") or []):
        return math.nan
    tv, observed, predicted, at = row.get("bias_tv_per_token") or [], [], [], 0
    for k, n, ws in zip(row.get("drafted", []), row.get("accepted", []), row.get("weights", []), strict=True):
        for j in range(min(n + 1, k)):
            if at + j < len(tv) and ws[j] < 1:
                observed.append(float(j < n))
                predicted.append(1 - ws[j] / (1 - ws[j]) * tv[at + j])
        at += n + 1
    return statistics.fmean(observed) - statistics.fmean(predicted) if observed else math.nan


def front_gap(row: dict, biased: bool = True) -> float:
    """Observed acceptance minus the static front's at the same bias, over the positions a prompt tested: a draft
    tested where the target and draft differ by TV(p, q), whose emitted token has bias b = TV(nu, p), is accepted
    with probability at most 1 - TV(p, q) + b (whatever emits nu accepts at most sum min(q, nu) <= 1 - TV(q, nu),
    and TV(q, nu) >= TV(p, q) - b); the static ensemble meets it with equality. nan without the record (FLy's
    bias, the baselines, runs written before TV(p, q) was recorded). biased False: the front at zero bias,
    1 - TV(p, q), strict's acceptance (block verification and FLy, which test drafts jointly, against it)."""
    tv_pq, bias = row.get("tv_pq_per_position"), row.get("bias_tv_per_token") or []
    if not tv_pq:
        return math.nan
    observed, front, at, tested = [], [], 0, 0
    for k, n in zip(row.get("drafted", []), row.get("accepted", []), strict=True):
        for j in range(min(n + 1, k)):
            if tested + j < len(tv_pq) and at + j < len(bias) and (not biased or bias[at + j] == bias[at + j]):
                observed.append(float(j < n))
                front.append(min(1.0, 1 - tv_pq[tested + j] + (bias[at + j] if biased else 0.0)))
        at, tested = at + n + 1, tested + min(n + 1, k)
    return statistics.fmean(observed) - statistics.fmean(front) if observed else math.nan


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else math.nan


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is corrupt: {e}") from e

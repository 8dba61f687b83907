"""The Hugging Face hub sources of a workflow config: `fetch` puts every hub model and dataset into the local
cache once (the workflow's fetch_sources rule, before any GPU job), `check` reads a model's config and a dataset's
first row in seconds, and that each pair's two tokenizers are one. A source that cannot be read is one line naming
the fix (gated: accept the license and set HF_TOKEN; offline or unreachable: where to run instead)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from diversed.decoding.settings import EMBEDDED_DRAFTS
from diversed.tasks import SPLITS, get_task, registry

if TYPE_CHECKING:
    from diversed.experiment.config import Experiment

MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]  # config, weights, tokenizer, templates
SKIP_FILES = ["original/*"]  # Llama's second copy of the weights, for Meta's own code
TRANSPORT_ERRORS = {"TransportError", "ConnectionError", "Timeout", "TimeoutException"}  # httpx, requests


@dataclass(frozen=True)
class Sources:
    """What a config reads from the hub: model ids, and the tasks whose data come from a hub dataset."""

    models: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.models or self.tasks)


def hub_model(name: str, prepare: str = "none") -> bool:
    """A hub id: not the embedded pair, not built by prepare-models, not a local folder."""
    return prepare == "none" and name not in EMBEDDED_DRAFTS and not os.path.exists(name)


def hub_task(name: str, data_files: str | dict | None = None) -> bool:
    """A task whose rows come from a hub dataset (not a local file, not built in)."""
    return not data_files and get_task(name).hub is not None


def hub_sources(x: Experiment) -> Sources:
    """The hub models and hub tasks of a workflow config (its `pairs` and `tasks`)."""
    models = [getattr(pair, role) for pair in x.pairs.values() for role in ("target", "draft")
              if hub_model(getattr(pair, role), pair.prepare)]
    tasks = [name for name, t in x.tasks.items() if hub_task(name, t.data_files)]
    return Sources(tuple(dict.fromkeys(models)), tuple(tasks))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").upper() in ("1", "ON", "YES", "TRUE")


def causes(e: BaseException) -> list[BaseException]:
    chain = [e]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain:
        chain.append(nxt)
    return chain


def unreachable(e: BaseException) -> bool:
    """A failure to reach the hub at all (network, DNS, timeout), not an answer from it."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return any(isinstance(c, (ConnectionError, TimeoutError, LocalEntryNotFoundError))
               or TRANSPORT_ERRORS & {t.__name__ for t in type(c).__mro__} for c in causes(e))


def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def problem(what: str, repo: str, e: BaseException, *, dataset: bool = False) -> str:
    """One line: why `what` (hub repo `repo`) cannot be read, and the fix."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    chain = causes(e)
    url = f"https://huggingface.co/{'datasets/' if dataset else ''}{repo}"
    if any(isinstance(c, GatedRepoError) for c in chain):
        token = ("HF_TOKEN is set: accept it with the account of that token" if os.environ.get("HF_TOKEN")
                 else "set HF_TOKEN to a read token of the account that accepted it")
        return f"{what}: gated on the Hugging Face hub; accept its license at {url} and {token}"
    if offline():
        return (f"{what}: not in the Hugging Face cache and HF_HUB_OFFLINE=1; run `diversed fetch-sources` where "
                f"the hub is reachable, with the same HF_HOME")
    if unreachable(e):
        return (f"{what}: the Hugging Face hub is unreachable ({type(chain[-1]).__name__}); run where it is "
                f"reachable (the submitting node), or set HF_ENDPOINT to a mirror")
    if any(isinstance(c, RepositoryNotFoundError) for c in chain):
        return f"{what}: not found at {url} (a typo, or a private repo: set HF_TOKEN)"
    return f"{what}: {one_line(e)}"


class Attempts:
    """Sources tried one by one, each failure one line in `failed`; once the hub proves unreachable, the hub
    sources left fail at once instead of each waiting for its own timeouts."""

    def __init__(self):
        self.failed: list[str] = []
        self.down = False

    def __call__(self, fn, what: str, repo: str | None = None, *, dataset: bool = False):
        """fn() (None if it failed); repo: the hub repo it reads, None for a local source."""
        if repo and self.down:
            self.failed.append(f"{what}: not tried, the Hugging Face hub is unreachable")
            return None
        try:
            return fn()
        except Exception as e:  # each source fails on its own line; the others are still tried
            self.failed.append(problem(what, repo, e, dataset=dataset) if repo else f"{what}: {one_line(e)}")
            self.down = bool(repo) and unreachable(e) and not offline()
            return None


# ------------------------------------------------------------------------------------------- fetch


def fetch_model(repo: str) -> str:
    """Download a hub model's config, weights and tokenizer into the cache; returns its snapshot folder."""
    from huggingface_hub import snapshot_download

    return snapshot_download(repo, allow_patterns=MODEL_FILES, ignore_patterns=SKIP_FILES)


def hub_splits(task) -> list[str]:
    """The hub splits a task reads (train, dev and eval may share one)."""
    return list(dict.fromkeys(task.source(s) for s in SPLITS))


def fetch(sources: Sources, log=print) -> tuple[dict, list[str]]:
    """Every model and every hub split of `sources` into the cache: (a record of what is there, one line per
    source that failed)."""
    record: dict = {"models": {}, "datasets": {}}
    attempt = Attempts()
    for repo in sources.models:
        if path := attempt(lambda repo=repo: fetch_model(repo), f"model {repo}", repo):
            record["models"][repo] = path
            log(f"model {repo}: {path}")
    for name in sources.tasks:
        task = get_task(name)
        if task.hub is None:
            raise ValueError(f"task {name} reads no hub dataset; hub tasks: "
                             f"{', '.join(n for n, t in registry().items() if t.hub is not None)}")
        for split in hub_splits(task):
            what = f"dataset {task.hub[0]} ({task.hub[1] or 'default'}, split {split}) of task {name}"
            rows = attempt(lambda task=task, split=split: task.source_rows(split), what, task.hub[0], dataset=True)
            if rows is not None:
                record["datasets"].setdefault(name, {})[split] = len(rows)
                log(f"{what}: {len(rows)} rows")
    return record, attempt.failed


# ------------------------------------------------------------------------------------------- check


def first_row(task, split: str) -> dict:
    """The first row of a hub split: streamed online (no download), from the cache offline."""
    import datasets

    path, name = task.hub
    if offline():
        return dict(datasets.load_dataset(path, name, split=split, revision=task.revision)[0])
    ds = datasets.load_dataset(path, name, split=split, revision=task.revision, streaming=True)
    return dict(next(iter(ds)))


def check_model(name: str) -> tuple[str, str]:
    """(status, detail) of one model: its config, from the hub, the cache or a local folder."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(name)
    return "OK", ", ".join(config.architectures or [config.model_type])


def check_tokenizers(target: str, draft: str, chat: bool = True) -> tuple[str, str]:
    """(status, detail) of a pair's tokenizers: speculative decoding needs one vocabulary and the same special
    tokens; chat prompts (chat) also one chat template (the prompts are encoded once, with the target's), which
    raw prompts never read (the Llama pair's templates differ)."""
    from transformers import AutoTokenizer

    t, d = AutoTokenizer.from_pretrained(target), AutoTokenizer.from_pretrained(draft)
    parts = [("vocabulary", t.get_vocab(), d.get_vocab()),
             ("special tokens", t.special_tokens_map, d.special_tokens_map)]
    parts += [("chat template", t.chat_template, d.chat_template)] if chat else []
    differ = [what for what, a, b in parts if a != b]
    if differ:
        return f"FAILED: the target's and the draft's tokenizers differ in {', '.join(differ)}", ""
    if chat and not t.chat_template:
        return "FAILED: no chat template (prompt_format chat encodes the prompts through it)", f"{len(t)} tokens"
    return "OK", f"identical, {len(t)} tokens" + (", chat template" if t.chat_template else "")


def check_task(name: str, data_files: str | dict | None = None) -> list[tuple[str, str, str]]:
    """(source, status, detail) of each source of a task: a hub split's first row, or a local or built-in
    task's rows."""
    task = get_task(name, data_files)
    if not hub_task(name, data_files):
        return [(f"{name} {split}", "OK", f"{len(task.rows(split))} rows") for split in SPLITS]
    out = []
    for split in hub_splits(task):
        row = task.flatten(first_row(task, split))
        missing = [f for f in task.fields if f not in row]
        status = f"FAILED: the first row has no field(s) {missing}" if missing else "OK"
        out.append((f"{task.hub[0]} ({task.hub[1] or 'default'}, {split})", status, ", ".join(sorted(row))))
    return out


def check(config: dict) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Every model and task of a workflow config: table rows (kind, source, status, detail), failure lines."""
    rows = []
    attempt = Attempts()
    models = {pair[role]: pair.get("prepare", "none") for pair in config.get("pairs", {}).values()
              for role in ("target", "draft")}
    for name, prepare in models.items():
        if prepare != "none" or name in EMBEDDED_DRAFTS:
            rows.append(("model", name, "built", "by prepare-models"))
            continue
        found = attempt(lambda name=name: check_model(name), f"model {name}", name if hub_model(name) else None)
        rows.append(("model", name, *(found or ("FAILED", ""))))
    for name, pair in config.get("pairs", {}).items():
        target, draft = pair["target"], pair["draft"]
        if pair.get("prepare", "none") != "none" or draft in EMBEDDED_DRAFTS:
            continue
        repo = target if hub_model(target) else draft if hub_model(draft) else None
        chat = config.get("prompt_format", "chat") == "chat"
        found = attempt(lambda target=target, draft=draft, chat=chat: check_tokenizers(target, draft, chat),
                        f"tokenizers of pair {name}", repo)
        rows.append(("tokenizers", f"{name}: {target} / {draft}", *(found or ("FAILED", ""))))
    for name, t in config.get("tasks", {}).items():
        task = get_task(name)
        if config.get("prompt_format") == "raw" and task.raw is None:
            rows.append(("task", name, "FAILED: no raw prompt template (prompt_format raw)", ""))
        if (config.get("distill") or {}).get("finetune") == "sft" and task.answer_field is None:
            rows.append(("task", name, "FAILED: no reference answers to fine-tune on (finetune sft)", ""))
        data_files = (t or {}).get("data_files")
        repo = task.hub[0] if hub_task(name, data_files) else None
        found = attempt(lambda name=name, data_files=data_files: check_task(name, data_files), f"task {name}", repo,
                        dataset=True)
        rows += [("dataset", *r) for r in found] if found else [("dataset", name, "FAILED", "")]
    failed = attempt.failed + [f"{source}: {status}" for _, source, status, _ in rows if status.startswith("FAILED:")]
    return rows, failed


def load_config(*paths: str | os.PathLike) -> dict:
    """A workflow config from one or more YAML files, each layered over the ones before as Snakemake's
    --configfile layers them (a mapping merges key by key, e.g. config/paper-gemma.yaml's pairs join the paper's)."""
    import yaml

    def merge(base: dict, over: dict) -> dict:
        return base | {k: merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                       for k, v in over.items()}

    config: dict = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"config {path} does not exist")
        try:
            layer = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as e:
            raise ValueError(f"config {path}: not UTF-8 text (byte {e.start})") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            raise ValueError(f"config {where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
        if not isinstance(layer, dict):
            raise ValueError(f"config {path} is not a mapping: not a workflow config")
        config = merge(config, layer)
    if not config.get("pairs") and not config.get("tasks"):
        raise ValueError(f"config {', '.join(map(str, paths))} has no pairs and no tasks: not a workflow config")
    return config

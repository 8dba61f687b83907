"""Hub sources: which models and datasets a config fetches, one line per source that cannot be read (gated,
offline, unreachable), and check-sources on local checkpoints of the paper's model classes. The hub is never
contacted: huggingface_hub and datasets are replaced by fakes."""

from __future__ import annotations

import json
import os

import httpx2
import pytest
import yaml
from helpers import ROOT, tiny_paper_model
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError

from diversed.cli import main
from diversed.decoding.models import char_tokenizer
from diversed.experiment.config import experiment
from diversed.experiment.sources import Sources, check, fetch, hub_sources, load_config

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
HUB_ROWS = {"openai/gsm8k": {"question": "1 + 1?", "answer": "1 + 1 = 2 #### 2"},
            "wmt/wmt16": {"translation": {"de": "Hallo", "en": "Hello"}}}  # the hub nests a pair


def gated(repo: str) -> GatedRepoError:
    request = httpx2.Request("GET", f"https://huggingface.co/{repo}/resolve/main/config.json")
    return GatedRepoError(f"Access to model {repo} is restricted.", response=httpx2.Response(401, request=request))


class FakeHub:
    """Stands in for the hub: records each repo asked for and raises errors[repo] if there is one."""

    def __init__(self):
        self.calls: list[str] = []
        self.errors: dict[str, BaseException] = {}

    def reach(self, repo: str) -> None:
        self.calls.append(repo)
        if repo in self.errors:
            raise self.errors[repo]


@pytest.fixture
def hub(monkeypatch):
    """snapshot_download, datasets.load_dataset and AutoConfig.from_pretrained (of a hub id) go to a FakeHub."""
    import datasets
    import huggingface_hub
    from transformers import AutoConfig, AutoTokenizer, PretrainedConfig

    fake, read_config = FakeHub(), AutoConfig.from_pretrained

    def snapshot_download(repo, **kwargs):
        fake.reach(repo)
        return f"/cache/models--{repo.replace('/', '--')}/snapshots/abc"

    def load_dataset(path, name=None, split=None, revision=None, streaming=False):
        fake.reach(path)
        row = HUB_ROWS.get(path, {"text": "x", "test_list": ["assert True"], "article": "a", "highlights": "h",
                                  "document": "d", "summary": "s"})
        return iter([row]) if streaming else [row] * 3

    def from_pretrained(name, **kwargs):
        if os.path.isdir(name):
            return read_config(name, **kwargs)
        fake.reach(name)
        return PretrainedConfig(architectures=["HubForCausalLM"])

    def tokenizer(name, **kwargs):  # a hub model's tokenizer: the character tokenizer
        if os.path.isdir(name):
            return read_tokenizer(name, **kwargs)
        fake.reach(name)
        return char_tokenizer()

    read_tokenizer = AutoTokenizer.from_pretrained
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(AutoConfig, "from_pretrained", from_pretrained)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", tokenizer)
    return fake


def test_the_paper_config_reads_four_models_and_four_datasets_from_the_hub():
    sources = hub_sources(experiment(load_config(ROOT / "config" / "paper.yaml")))
    assert len(sources.models) == 4 and LLAMA in sources.models and "Qwen/Qwen3-0.6B" in sources.models
    assert sources.tasks == ("gsm8k", "cnndm", "xsum", "mbpp")
    layered = hub_sources(experiment(load_config(ROOT / "config" / "paper.yaml", ROOT / "config" / "paper-gemma.yaml")))
    assert len(layered.models) == 6 and "google/gemma-3-12b-it" in layered.models  # Gemma 3 opt-in, layered
    assert layered.tasks == sources.tasks
    assert not hub_sources(experiment(load_config(ROOT / "config" / "smoke.yaml")))  # local models, built-in tasks
    local = {"pairs": {"p": {"target": str(ROOT), "draft": "embedded"}}, "tasks": {"gsm8k": {"data_files": "x"}}}
    assert not hub_sources(experiment(local))


def test_fetch_downloads_every_model_and_every_hub_split(hub):
    record, failed = fetch(Sources((LLAMA,), ("gsm8k", "wmt16-de-en")), log=lambda line: None)
    assert not failed and record["models"][LLAMA].endswith("snapshots/abc")
    assert record["datasets"]["gsm8k"] == {"train": 3, "test": 3}  # dev is a part of train
    assert record["datasets"]["wmt16-de-en"] == {"train": 3, "validation": 3, "test": 3}


def test_a_gated_model_is_one_line_naming_the_license_and_hf_token(hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.errors[LLAMA] = gated(LLAMA)
    _, failed = fetch(Sources((LLAMA, "Qwen/Qwen3-8B"), ()), log=lambda line: None)
    assert len(failed) == 1 and "\n" not in failed[0]
    assert failed[0].startswith(f"model {LLAMA}: gated") and f"https://huggingface.co/{LLAMA}" in failed[0]
    assert "set HF_TOKEN" in failed[0]
    assert hub.calls == [LLAMA, "Qwen/Qwen3-8B"]  # the other sources are still fetched

    monkeypatch.setenv("HF_TOKEN", "hf_x")
    _, failed = fetch(Sources((LLAMA,), ()), log=lambda line: None)
    assert "HF_TOKEN is set: accept it with the account of that token" in failed[0]


@pytest.mark.parametrize(("offline", "error", "says"), [
    ("1", LocalEntryNotFoundError("Cannot find the requested files in the local cache"),
     "not in the Hugging Face cache and HF_HUB_OFFLINE=1"),
    ("0", httpx2.ConnectError("[Errno -3] Temporary failure in name resolution"), "Hugging Face hub is unreachable"),
    ("0", ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub"), "Hugging Face hub is unreachable"),
])
def test_offline_or_unreachable_is_one_line_per_source(hub, monkeypatch, offline, error, says):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    hub.errors = {LLAMA: error, "openai/gsm8k": error}
    _, failed = fetch(Sources((LLAMA,), ("gsm8k",)), log=lambda line: None)
    assert failed and all("\n" not in line for line in failed)
    assert says in failed[0] and failed[0].startswith(f"model {LLAMA}: ")
    if offline == "1":  # each source fails at once from the cache
        assert all(says in line for line in failed) and "dataset openai/gsm8k (main, split train)" in failed[1]
    else:  # one timeout is enough: the hub sources left are not tried
        assert hub.calls == [LLAMA] and failed[1].endswith("not tried, the Hugging Face hub is unreachable")


def test_a_gated_dataset_names_its_dataset_page(hub):
    hub.errors["openai/gsm8k"] = gated("openai/gsm8k")
    _, failed = fetch(Sources((), ("gsm8k",)), log=lambda line: None)
    assert len(failed) == 2 and "https://huggingface.co/datasets/openai/gsm8k" in failed[0]  # train and test


def test_fetch_sources_cli_records_only_a_complete_fetch(hub, tmp_path, capsys):
    record = tmp_path / "sources.json"
    main(["fetch-sources", "--config", str(ROOT / "config" / "paper.yaml"), str(ROOT / "config" / "paper-gemma.yaml"),
          "--record", str(record)])  # the two configs layered: Gemma 3's pair joins the paper's two
    fetched = json.loads(record.read_text())
    assert len(fetched["models"]) == 6 and set(fetched["datasets"]) == {"gsm8k", "cnndm", "xsum", "mbpp"}

    record.unlink()
    hub.errors[LLAMA] = gated(LLAMA)
    with pytest.raises(SystemExit) as e:
        main(["fetch-sources", "--model", LLAMA, "--record", str(record)])
    err = capsys.readouterr().err
    assert e.value.code == 1 and not record.exists() and err.count("\n") == 2, err  # the source's line, the count
    assert err.splitlines()[1] == "error: 1 source(s) could not be fetched; nothing recorded"
    with pytest.raises(SystemExit, match="2"):
        main(["fetch-sources", "--task", "arith"])  # built in: nothing on the hub


def test_check_sources_reads_configs_of_the_paper_classes_and_one_row_per_hub_split(hub, tmp_path, monkeypatch,
                                                                                     capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # streams one row of each hub split
    paths = {}
    for kind in ("llama3", "qwen3", "gemma3"):
        paths[kind] = tmp_path / kind
        tiny_paper_model(kind).save_pretrained(paths[kind])
        char_tokenizer().save_pretrained(paths[kind])
    config = {"pairs": {"llama": {"target": str(paths["llama3"]), "draft": str(paths["qwen3"])},
                        "gemma": {"target": str(paths["gemma3"]), "draft": "google/gemma-3-4b-it"},
                        "qwen": {"target": "Qwen/Qwen3-8B", "draft": str(paths["qwen3"])},
                        "tiny": {"target": "resources/models/tiny/t", "draft": "d", "prepare": "tiny"}},
              "tasks": {"gsm8k": {}, "wmt16-de-en": {}, "arith": {}}}
    hub.errors["google/gemma-3-4b-it"] = OSError("You are trying to access a gated repo.")  # as transformers says
    hub.errors["google/gemma-3-4b-it"].__cause__ = gated("google/gemma-3-4b-it")
    rows, failed = check(config)
    status = {(kind, source): (s, detail) for kind, source, s, detail in rows}
    assert status[("model", str(paths["llama3"]))] == ("OK", "LlamaForCausalLM")
    assert status[("model", str(paths["gemma3"]))] == ("OK", "Gemma3ForConditionalGeneration")
    assert status[("model", str(paths["qwen3"]))] == ("OK", "Qwen3ForCausalLM")
    assert status[("model", "Qwen/Qwen3-8B")] == ("OK", "HubForCausalLM")
    assert status[("model", "resources/models/tiny/t")][0] == "built"
    assert status[("dataset", "wmt/wmt16 (de-en, validation)")] == ("OK", "de, en")  # flattened
    assert status[("dataset", "openai/gsm8k (main, train)")][0] == "OK" and status[("dataset", "arith eval")][0] == "OK"
    assert status[("tokenizers", f"llama: {paths['llama3']} / {paths['qwen3']}")] == (
        "OK", "identical, 101 tokens, chat template")
    assert status[("tokenizers", f"qwen: Qwen/Qwen3-8B / {paths['qwen3']}")][0] == "OK"
    assert status[("tokenizers", f"gemma: {paths['gemma3']} / google/gemma-3-4b-it")][0] == "FAILED"  # gated
    assert len(failed) == 2 and "google/gemma-3-4b-it: gated" in failed[0], failed
    assert failed[1].startswith("tokenizers of pair gemma: gated") and "google/gemma-3-4b-it" in failed[1]

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as e:
        main(["check-sources", "--config", str(path)])
    out, err = capsys.readouterr()
    assert e.value.code == 1 and "2 source(s)" in err.splitlines()[-1]
    assert "| model " in out and "Gemma3ForConditionalGeneration" in out


def test_a_hub_split_without_the_task_fields_fails_its_check(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setitem(HUB_ROWS, "openai/gsm8k", {"question": "a row without its answer"})
    _, failed = check({"tasks": {"gsm8k": {}}})
    assert failed and all("has no field(s) ['answer']" in line for line in failed)


def test_check_sources_refuses_a_pair_whose_tokenizers_differ(hub, tmp_path):
    """Regression: a target and draft with different tokenizers (or no chat template) passed check-sources and
    failed only inside a GPU job."""
    from transformers import AutoTokenizer

    same, other, bare = tmp_path / "same", tmp_path / "other", tmp_path / "bare"
    char_tokenizer().save_pretrained(same)
    tok = char_tokenizer()
    tok.add_tokens(["<extra>"])
    tok.save_pretrained(other)
    tok = char_tokenizer()
    tok.chat_template = None
    tok.save_pretrained(bare)
    templated = tmp_path / "templated"  # the same tokens, another chat template
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    tok.save_pretrained(templated)
    assert AutoTokenizer.from_pretrained(str(other)).get_vocab() != AutoTokenizer.from_pretrained(str(same)).get_vocab()
    pairs = {"differ": {"target": str(same), "draft": str(other)}, "bare": {"target": str(bare), "draft": str(bare)},
             "ok": {"target": str(same), "draft": str(same)}, "templates": {"target": str(same),
                                                                           "draft": str(templated)}}
    rows, failed = check({"pairs": pairs})
    status = {source.split(":")[0]: s for kind, source, s, _ in rows if kind == "tokenizers"}
    assert status["differ"] == "FAILED: the target's and the draft's tokenizers differ in vocabulary"
    assert status["bare"].startswith("FAILED: no chat template") and status["ok"] == "OK"
    assert status["templates"] == "FAILED: the target's and the draft's tokenizers differ in chat template"
    assert sorted(line.split(":")[0] for line in failed
                  if not line.startswith("model ")) == ["bare", "differ", "templates"]
    raw, _ = check({"pairs": pairs, "prompt_format": "raw"})  # raw prompts never use the chat template
    raw = {source.split(":")[0]: s for kind, source, s, _ in raw if kind == "tokenizers"}
    assert raw["bare"] == raw["templates"] == "OK" and raw["differ"].startswith("FAILED")


def test_check_sources_refuses_a_raw_or_sft_task_that_cannot_have_one():
    from diversed.experiment.sources import check

    _, failed = check({"tasks": {"open": {}, "capitals": {}}, "prompt_format": "raw",
                       "distill": {"finetune": "sft"}})
    assert "open: FAILED: no raw prompt template (prompt_format raw)" in failed
    assert "capitals: FAILED: no reference answers to fine-tune on (finetune sft)" in failed

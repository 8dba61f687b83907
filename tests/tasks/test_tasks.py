"""Tasks: scorers on hand-written examples (malformed output included), metric specs, splits, offline errors."""

from __future__ import annotations

import json

import pytest
from helpers import hub_row

from diversed.tasks import FIDELITY, SPLITS, DataUnavailable, Example, get_task, metric_spec, registry
from diversed.tasks.common import answer_number, code_block, last_number


def test_registry_names():
    assert set(registry()) == {"gsm8k", "arith", "capitals", "cnndm", "xsum", "mbpp", "humaneval", "wmt16-de-en",
                               "open"}
    with pytest.raises(ValueError, match="unknown task 'mmlu'"):
        get_task("mmlu")


@pytest.mark.parametrize(("text", "expected"), [
    ("so the total is 1,234.", "1234"), ("The answer is 42.\nCheck: 40 + 2", "42"), ("-3 and 7.50", "7.5"),
    ("no number here", None), ("", None), (None, None),
])
def test_answer_number(text, expected):
    assert answer_number(text) == expected


def test_gsm8k_scoring(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "2 + 3?", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    task = get_task("gsm8k", {"eval": str(data)})
    (ex,) = task.examples("eval")
    assert ex.reference == "5" and "2 + 3?" in ex.prompt
    assert task.score("2 + 3 = 5. The answer is 5.", ex) == {"accuracy": 1.0}
    assert task.score("The answer is 6", ex) == {"accuracy": 0.0}
    assert task.score("", ex) == {"accuracy": 0.0}
    assert task.score("I don't know", ex) == {"accuracy": 0.0}
    assert last_number("5 apples") == "5"


def test_arith_is_seeded_and_splits_disjoint():
    task = get_task("arith")
    a, b = task.examples("eval", 20, seed=0), task.examples("eval", 20, seed=0)
    assert [e.prompt for e in a] == [e.prompt for e in b]
    train = {e.prompt for e in task.examples("train")}
    assert not train & {e.prompt for e in task.examples("eval")}
    ex = a[0]
    assert task.score(f"The answer is {ex.reference}", ex)["accuracy"] == 1.0
    assert task.score("banana", ex)["accuracy"] == 0.0


def test_capitals_splits_are_disjoint_and_any_spelling_counts():
    task = get_task("capitals")
    splits = {s: {e.prompt for e in task.examples(s)} for s in ("train", "dev", "eval")}
    assert [len(p) for p in splits.values()] == [51, 26, 51]
    assert not (splits["train"] & splits["eval"]) and not (splits["dev"] & splits["eval"])
    kyiv = Example("1", "What is the capital of Ukraine?", ["Kyiv", "Kiev"])
    assert task.score("The capital of Ukraine is Kiev.", kyiv) == {"accuracy": 1.0}
    brasilia = Example("2", "What is the capital of Brazil?", ["Brasília"])
    assert task.score("It is Brasilia, built in 1960.", brasilia) == {"accuracy": 1.0}
    assert task.score("Rio de Janeiro", brasilia) == {"accuracy": 0.0}
    assert task.score("Parisian food", Example("3", "What is the capital of France?", ["Paris"])) == {"accuracy": 0.0}


def test_rouge_scoring():
    task = get_task("cnndm", "unused")
    ex = Example("1", "p", "the cat sat on the mat")
    assert task.score("the cat sat on the mat", ex)["rouge2"] == pytest.approx(100.0)
    assert task.score("dogs bark loudly", ex)["rouge2"] == 0.0
    assert task.score("", ex) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}


def test_bleu_scoring():
    task = get_task("wmt16-de-en", "unused")
    ex = Example("1", "p", "The weather is nice today.")
    assert task.score("The weather is nice today.\nmore", ex)["sentence_bleu"] == pytest.approx(100.0)
    assert task.score("", ex)["sentence_bleu"] == 0.0
    assert task.quality(["The weather is nice today."], [ex]) == pytest.approx(100.0)
    assert task.reward("The weather is nice today.", ex) == pytest.approx(1.0)  # percent scaled to [0, 1]


def test_bleu_headline_is_corpus_bleu():
    """Corpus BLEU pools n-gram counts and brevity over the set: not the mean of sentence BLEU."""
    import sacrebleu

    task = get_task("wmt16-de-en", "unused")
    refs = ["The cat sat on the mat today.", "A quick brown fox jumps over the lazy dog near the river.",
            "It is raining in Berlin."]
    hyps = ["The cat sat on the mat today.", "A fox jumps.", "It rains in Berlin."]
    examples = [Example(str(i), "p", r) for i, r in enumerate(refs)]
    corpus = sacrebleu.corpus_bleu(hyps, [refs]).score
    mean = sum(task.score(h, e)["sentence_bleu"] for h, e in zip(hyps, examples, strict=True)) / len(hyps)
    assert abs(corpus - mean) > 1
    assert task.metric.corpus and task.quality(hyps, examples) == pytest.approx(corpus)


def test_every_task_owns_one_metric_spec():
    """Tasks that report the same metric name agree on its spec; the name finds it back."""
    for task in registry().values():
        assert metric_spec(task.metric.name) == task.metric
    assert metric_spec("target_logprob") == FIDELITY and get_task("open").metric.fidelity
    assert metric_spec("accuracy").unit == "fraction" and metric_spec("rouge2").unit == "percent"
    with pytest.raises(ValueError, match="unknown metric 'f1'; allowed: accuracy"):
        metric_spec("f1")
    with pytest.raises(ValueError, match="no references"):
        get_task("open").reward("text", Example("1", "p", None))


def test_metric_keys_match_the_scorers():
    """`Metric.per_example` names exactly the keys each task's scorer returns."""
    ex = Example("1", "p", "the cat sat on the mat")
    for name in ("cnndm", "xsum", "wmt16-de-en", "gsm8k", "arith"):
        task = get_task(name, "unused")
        assert set(task.score("the cat sat", ex)) == set(task.metric.per_example), name
    assert get_task("open").score("x", ex) == {} and get_task("open").metric.per_example == ()


MBPP_ROW = {"text": "Write a function to add two numbers.", "test_list": ["assert add(1, 2) == 3"],
            "test_setup_code": ""}


@pytest.mark.slow  # runs candidates in the sandbox
@pytest.mark.parametrize(("completion", "passed"), [
    ("```python\ndef add(a, b):\n    return a + b\n```", 1.0),
    ("def add(a, b):\n    return a + b", 1.0),
    ("```python\ndef add(a, b):\n    return a - b\n```", 0.0),
    ("```python\ndef add(a, b:\n```", 0.0),  # syntax error
    ("", 0.0),
    ("```python\ndef add(a, b):\n    while True: pass\n```", 0.0),  # infinite loop
    ("```python\nimport os\nwhile True: os.fork()\n```", 0.0),  # fork bomb
])
def test_mbpp_scoring(tmp_path, completion, passed, monkeypatch):
    import diversed.tasks.code as code

    monkeypatch.setattr(code, "TIMEOUT_S", 3.0)
    data = tmp_path / "mbpp.jsonl"
    data.write_text(json.dumps(MBPP_ROW) + "\n")
    task = get_task("mbpp", {"eval": str(data)})
    (ex,) = task.examples("eval")
    scores = task.score(completion, ex)
    assert set(scores) == {"pass@1", "timed_out"} and scores["pass@1"] == passed
    if "while True: pass" in completion:
        assert scores["timed_out"] == 1.0  # each sample's status: passed, timed out, or its tests failed


def test_a_sandbox_that_cannot_run_programs_stops_the_scoring(tmp_path, monkeypatch):
    """Regression: a sandbox failure (bwrap refused, fork refused) scored as wrong code, silently. The sandbox
    tool's own error is an infrastructure error, and scoring stops with a message naming it."""
    import diversed.tasks.execution as execution
    from diversed.tasks.code import SandboxFailed

    execution.best_isolation()  # checked once per process, with the real tools, before they are broken here
    broken = "echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2; exit 1"
    monkeypatch.setattr(execution, "_isolated", lambda isolation, cmd, work: ["/bin/sh", "-c", broken])
    result = execution.run_untrusted("print(1)", isolation="bwrap")
    assert result.status == "error" and not result.passed
    data = tmp_path / "mbpp.jsonl"
    data.write_text(json.dumps(MBPP_ROW) + "\n")
    task = get_task("mbpp", {"eval": str(data)})
    (ex,) = task.examples("eval")
    with pytest.raises(SandboxFailed, match=r"code sandbox \(\w+\) could not run a program: bwrap: Creating new"):
        task.score("def add(a, b):\n    return a + b", ex)
    failing = "import sys; sys.stderr.write('bwrap? no: my own error'); sys.exit(1)"  # the candidate's own stderr
    monkeypatch.undo()
    assert execution.run_untrusted(failing).status == "failed"


@pytest.mark.slow  # 164 sandboxed subprocesses
def test_humaneval_ships_164_problems_and_scores_canonical_solutions():
    task = get_task("humaneval")
    assert sum(len(task.rows(s)) for s in SPLITS) == 164  # one source: train, dev and eval divide it
    rows = task.rows("eval")
    examples = task.examples("eval", 3, seed=0)
    for ex, row in zip(examples, [r for r in rows if r["task_id"] in {e.id for e in examples}], strict=True):
        passed, failed = {"pass@1": 1.0, "timed_out": 0.0}, {"pass@1": 0.0, "timed_out": 0.0}
        assert task.score(row["canonical_solution"], ex) == passed  # a bare body continues the prompt
        full = f"```python\n{row['prompt']}{row['canonical_solution']}```"
        assert task.score(full, ex) == passed
        assert task.score("    return None\n", ex) == failed


def test_code_block_extraction():
    assert code_block("text\n```python\nx = 1\n```\nmore") == "x = 1\n"
    assert code_block("```\ny = 2\n```") == "y = 2\n"
    assert code_block("plain") == "plain"


def test_offline_hub_task_is_a_clear_error_not_a_hang(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(DataUnavailable, match="openai/gsm8k.*data_files") as e:
        get_task("gsm8k").examples("eval", 5)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_offline_hub_task_on_the_command_line_is_one_line(monkeypatch, tmp_path, capsys):
    from diversed.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(SystemExit) as e:
        main(["export-task", "--task", "gsm8k", "-n", "2", "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: task gsm8k: cannot load openai/gsm8k") and "--data-files" in err


def test_local_file_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match="missing \\['answer'\\]"):
        get_task("gsm8k", str(bad)).examples("eval")
    with pytest.raises(DataUnavailable, match="task gsm8k: data_files .*none.jsonl does not exist"):
        get_task("gsm8k", str(tmp_path / "none.jsonl")).examples("eval")
    with pytest.raises(ValueError, match="unknown split 'test'; allowed: train, dev, eval"):
        get_task("arith").examples("test")
    with pytest.raises(ValueError, match="data_files has no 'train' file"):
        get_task("gsm8k", {"eval": str(bad)}).examples("train")


# ------------------------------------------------------------------------------------------- sources and splits


# task -> the load_dataset arguments that work with the pinned datasets: (path, name, revision) and the hub split
# that each of our splits (train, dev, eval) reads
HUB_LOADS = {
    "gsm8k": ("openai/gsm8k", "main", None, ("train", "train", "test")),  # no validation split: dev held out of train
    "cnndm": ("abisee/cnn_dailymail", "3.0.0", None, ("train", "validation", "test")),
    "xsum": ("EdinburghNLP/xsum", None, "refs/convert/parquet", ("train", "validation", "test")),  # main: a script
    "mbpp": ("google-research-datasets/mbpp", "full", None, ("train", "validation", "test")),
    "wmt16-de-en": ("wmt/wmt16", "de-en", None, ("train", "validation", "test")),
}


def split_prompts(task) -> dict[str, set[str]]:
    return {s: {e.prompt for e in task.examples(s)} for s in SPLITS}


def assert_disjoint(prompts: dict[str, set[str]]) -> None:
    for i, a in enumerate(SPLITS):
        assert prompts[a], a
        for b in SPLITS[i + 1:]:
            assert not prompts[a] & prompts[b], (a, b)


@pytest.mark.parametrize("name", sorted(HUB_LOADS))
def test_hub_tasks_load_what_the_hub_serves(name, monkeypatch):
    """Each hub task asks load_dataset for a revision and splits that exist (XSum: the parquet export, as its main
    branch is a loading script the pinned datasets refuses), and its splits stay disjoint even where the hub's
    splits share a prompt."""
    import datasets

    calls = []
    offsets = {"train": 0, "validation": 100, "test": 200}

    def load_dataset(path, config=None, *, split, revision=None, **kwargs):
        calls.append((path, config, revision, split))
        rows = [hub_row(name, offsets[split] + i) for i in range(9)]
        return rows + ([hub_row(name, 200)] if split != "test" else [])  # a test prompt in the other splits too

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    assert {n for n, t in registry().items() if t.hub} == set(HUB_LOADS)
    path, config, revision, hub_splits = HUB_LOADS[name]
    prompts = split_prompts(get_task(name))
    assert set(calls) == {(path, config, revision, s) for s in hub_splits}
    assert_disjoint(prompts)


@pytest.mark.parametrize("name", sorted(registry()))
def test_train_dev_and_eval_prompts_are_disjoint(name, tmp_path):
    """Every task, on its built-in data or a local file in the hub's row format (duplicates included): three
    disjoint, non-empty splits that together hold every prompt."""
    cls = registry()[name]
    if cls.hub:
        rows = [hub_row(name, i) for i in range(15)]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[3:5]))
        task = get_task(name, str(path))
        prompts = split_prompts(task)
        assert set().union(*prompts.values()) == {task.to_example(task.flatten(r), "").prompt for r in rows}
    else:
        prompts = split_prompts(get_task(name))
    assert_disjoint(prompts)


def test_one_file_per_split_and_the_later_split_keeps_a_shared_prompt(tmp_path):
    for split, ids in {"train": [0, 1, 2, 9], "dev": [3, 4, 9], "eval": [5, 6, 9]}.items():
        (tmp_path / f"gsm8k-{split}.jsonl").write_text("".join(json.dumps(hub_row("gsm8k", i)) + "\n" for i in ids))
    task = get_task("gsm8k", str(tmp_path / "gsm8k-{split}.jsonl"))
    refs = {s: [e.reference for e in task.examples(s)] for s in SPLITS}
    assert refs == {"train": ["0", "1", "2"], "dev": ["3", "4"], "eval": ["5", "6", "9"]}


def test_one_file_is_divided_two_one_two(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(hub_row("gsm8k", i)) + "\n" for i in range(10)))
    task = get_task("gsm8k", str(path))
    assert [len(task.rows(s)) for s in SPLITS] == [4, 2, 4]
    assert [e.prompt for e in task.examples("eval")] == [e.prompt for e in get_task("gsm8k", str(path)).examples()]
    path.write_text(json.dumps(hub_row("gsm8k", 0)) + "\n")
    with pytest.raises(ValueError, match="has no rows; .*train:dev:eval = 2:1:2"):
        get_task("gsm8k", str(path)).examples("eval")


@pytest.mark.parametrize("form", ["hub", "flat"])
def test_wmt16_local_file_in_either_form(tmp_path, form):
    """Regression: a local file in the hub's row format ({"translation": {"de", "en"}}) failed the field check."""
    pair = {"de": "Das Wetter ist heute schön.", "en": "The weather is nice today."}
    path = tmp_path / "wmt16.jsonl"
    path.write_text(json.dumps({"translation": pair} if form == "hub" else pair) + "\n")
    (ex,) = get_task("wmt16-de-en", {"eval": str(path)}).examples("eval")
    assert ex.prompt.endswith(pair["de"]) and ex.reference == pair["en"]


def test_every_local_task_reads_its_hubs_own_row_format(tmp_path):
    """One row of each dataset exactly as the hub serves it (extra fields, nesting) is a valid local file."""
    for name in ("gsm8k", "cnndm", "xsum", "mbpp", "wmt16-de-en", "humaneval"):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(hub_row(name, 7)) + "\n")
        (ex,) = get_task(name, {"eval": str(path)}).examples("eval")
        assert "7" in ex.prompt and ex.reference, name


RAW = {  # the authors' prompt of row 7 of each paper task (their data loaders)
    "gsm8k": "Question: Tom has 7 apples. How many apples does he have?\n\nAnswer:",
    "cnndm": "Summarize the following article:\n\nArticle: (CNN) The council met on day 7 and voted.\n\nSummary:",
    "xsum": "Write a concise summary of the following document:\n\nDocument: Rain fell in Wales on day 7.\n\nSummary:",
    "mbpp": "Write a Python function to solve the following problem:\n\nWrite a function to add 7 to a number.\n\n"
            "Your solution should pass these tests:\n['assert f(0) == 7']",
    "wmt16-de-en": "Translate the following German text to English:\n\nGerman: Das ist Satz 7.\n\nEnglish:",
    "humaneval": "Write a Python function to solve the following problem:\n\ndef f7(x):\n    \"\"\"Add 7.\"\"\"\n",
}
ANSWERS = {"gsm8k": "He has 7.\n#### 7", "cnndm": "Council voted on day 7.", "xsum": "Wet day 7 in Wales.",
           "mbpp": "def f(x):\n    return x + 7", "wmt16-de-en": "This is sentence 7.", "humaneval": "    return x + 7"}


@pytest.mark.parametrize("name", sorted(RAW))
def test_raw_prompts_are_the_authors_templates_and_answers_the_references(name, tmp_path):
    """prompt_format raw: the paper task's plain template (no instructions of ours); finetune sft learns the
    reference answers, row by row as the examples; the references and scoring do not change."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(hub_row(name, 7)) + "\n")
    task = get_task(name, {"eval": str(path)})
    (raw,), (chat,) = task.examples("eval", prompt_format="raw"), task.examples("eval")
    assert raw.prompt == RAW[name] and chat.prompt != raw.prompt
    assert raw.reference == chat.reference and raw.id == chat.id
    assert task.answers("eval") == [ANSWERS[name]]


def test_a_task_without_a_raw_template_or_answers_is_a_clear_error():
    with pytest.raises(ValueError, match="task open has no raw prompt template: use prompt_format chat"):
        get_task("open").examples("eval", prompt_format="raw")
    with pytest.raises(ValueError, match="unknown prompt format 'plain'; allowed: chat, raw"):
        get_task("capitals").examples("eval", prompt_format="plain")
    with pytest.raises(ValueError, match="task open has no reference answer text: fine-tune its draft with distill"):
        get_task("open").answers("train")


def test_sft_answers_follow_the_subsample(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(hub_row("gsm8k", i)) + "\n" for i in range(30)))
    task = get_task("gsm8k", {s: str(path) for s in SPLITS})
    examples, answers = task.examples("eval", 5, seed=3), task.answers("eval", 5, seed=3)
    assert [e.reference for e in examples] == [a.split("####")[-1].strip() for a in answers]


RUN_ON = ("Tom has 3 + 15 = 18 eggs.\n#### 18\n\nQuestion: Ann has 2 pens and buys 5. How many?\n"
          "Answer: 7 pens. The answer is 7")


def test_authors_scoring_cuts_a_run_on_gsm8k_completion_and_reads_the_hash_answer(tmp_path):
    """A raw completion runs on into an invented next example: the standard scorer reads its "answer is 7" (wrong),
    the authors' cut at "Question:" and read "#### 18" (right); without "####" they take the last number."""
    task = get_task("gsm8k", "unused")
    ex = Example("1", "p", "18")
    assert task.scores(RUN_ON, ex, "standard") == {"accuracy": 0.0}
    assert task.scores(RUN_ON, ex, "authors") == {"accuracy": 1.0}
    assert task.scores("18 eggs, then 3 more: 21", ex, "authors") == {"accuracy": 0.0}  # the last number
    assert task.scores("The answer is 18. Check: 9 x 2", ex, "authors") == {"accuracy": 0.0}  # no "answer is" rule
    assert task.cut(RUN_ON) == "Tom has 3 + 15 = 18 eggs.\n#### 18\n\n"
    with pytest.raises(ValueError, match="unknown scoring 'theirs'; allowed: standard, authors"):
        task.scores(RUN_ON, ex, "theirs")


# (completion, the authors' answer: scripts/run_dp.py's find_answer run on it); read against their regexes
AUTHORS_GSM8K = [
    ("48+24 = 72 clips.\n#### 72", 72), ("She earns 12 * 5 = 60 dollars. The answer is 60.", 60),
    ("The total cost is $1,234.50.", 1234),  # commas dropped, rounded half to even
    ("### 3.7", 3),  # "###" takes an integer: the decimals are dropped
    ("#### -12", -12), ("It takes 2.5 hours.", 2), ("He pays 3.5 dollars.", 4),
    ("### 1. Total apples: 3 + 4 = 7", 1),  # a markdown heading is read as the answer
    ("### Step 1: add 5 + 7 = 12", 12), ("The answer is 42.\n####", 42),
    ("The difference is 20-15", 15),  # no digit may precede the "-"
    ("The temperature fell to -5 degrees.", -5), ("I cannot determine it.", None),
    ("3 + 4 = 7\n#### 7\n#### 9", 7),  # the first "###", where the last "####" would give 9
]


@pytest.mark.parametrize(("completion", "answer"), AUTHORS_GSM8K)
def test_gsm8k_answers_as_the_authors_code_extracts_them(completion, answer):
    """#47 item 6: the first "###" (an integer), else the last number, banker's rounding; the earlier reading
    (the last "####", decimals kept) differs on 7 of these."""
    from diversed.tasks.common import authors_number

    assert authors_number(completion) == answer
    task = get_task("gsm8k", "unused")
    if answer is not None:
        assert task.scores(completion, Example("1", "p", str(answer)), "authors") == {"accuracy": 1.0}
    assert task.scores("I cannot determine it.", Example("1", "p", "0"), "authors") == {"accuracy": 0.0}


def test_xsum_is_scored_on_its_first_32_words_as_the_authors_evaluate():
    """#47 item 3: the authors' evaluation scores an XSum summary's first 32 words (their head's reward reads it
    whole); a long summary that starts with the reference scores 100 under their scoring, less under ours."""
    task = get_task("xsum", "unused")
    reference = " ".join(f"w{i}" for i in range(32))
    ex = Example("1", "p", reference)
    long = reference + " " + " ".join(f"x{i}" for i in range(40))
    assert task.scores(long, ex, "authors")["rouge2"] == pytest.approx(100.0)
    assert task.scores(long, ex, "standard")["rouge2"] < 70
    assert task.reward(long, ex, "authors") < 0.7  # the reward: the whole summary
    short = "w0 w1  w2"
    assert task.scores(short, ex, "authors") == task.authors_score(short, ex)  # under 32 words: as it is


def test_authors_rouge_is_unstemmed_and_cut_at_the_next_article():
    task = get_task("cnndm", "unused")
    ex = Example("1", "p", "the cats were running home")
    standard, authors = task.scores("the cat was run home", ex), task.scores("the cat was run home", ex, "authors")
    assert standard["rouge1"] > authors["rouge1"]  # cats/cat and running/run match only when stemmed
    assert authors == task.authors_score("the cat was run home", ex)
    run_on = "the cats were running home\n\nArticle: a new story about dogs"
    assert task.scores(run_on, ex, "authors")["rouge2"] == pytest.approx(100.0)
    assert task.scores(run_on, ex)["rouge2"] < 100.0
    assert get_task("xsum", "unused").cut("one line\n\nDocument: more") == "one line"


def test_diversed_score_scores_one_completion_as_json():
    import subprocess
    import sys

    def score(*args):
        done = subprocess.run([sys.executable, "-m", "diversed.cli", "score", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    args = ["--task", "gsm8k", "--prompt-format", "raw", "--reference", "2 eggs and 16 more: 18\n#### 18",
            "--completion", RUN_ON]
    assert score(*args, "--scoring", "authors")["accuracy"] == 1.0
    out = score(*args)
    assert out["accuracy"] == 0.0 and out["scoring"] == "standard" and out["scored_text"] == RUN_ON

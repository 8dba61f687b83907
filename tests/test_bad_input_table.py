"""Every bad input a user can type, refused before compute: one table of cases across the commands and the workflow's
config. Each case runs the `diversed` command in this process with model loading made to fail (so a case that
reaches a model fails the test), in a workspace that holds a user's files, and asserts the exit code (2: bad input),
one line on stderr naming the offending value or file, no traceback, and that no file of the workspace changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from diversed.cli import main

G = ["generate", "--target", "{T}", "--draft", "{D}", "--max-new-tokens", "4"]  # a valid pair; prompts per case
P = ["--prompt", "hi"]
SW = ["sweep-weight", "--target", "{T}", "--draft", "{D}", "--task", "arith", "-n", "1", "--max-new-tokens", "2",
      "--out", "{W}/sweep"]
TH = ["train", "head", "--target", "{T}", "--draft", "{D}", "--task", "arith"]

# (case, arguments, message on stderr); every case exits 2. {W}: the workspace, {T}/{D}: the tiny pair, {H}: a home.
CASES = [
    # numbers: finite, in range, counts >= 1
    ("temperature nan", [*G, *P, "--temperature", "nan"], "--temperature: nan is not a finite number"),
    ("temperature inf", [*G, *P, "--temperature", "inf"], "--temperature: inf is not a finite number"),
    ("temperature < 0", [*G, *P, "--temperature", "-1"], "temperature must be >= 0"),
    ("weight nan", [*G, *P, "--verifier", "fixed", "--weight", "nan"], "--weight: nan is not a finite number"),
    ("weight > 1", [*G, *P, "--verifier", "fixed", "--weight", "1.5"], "weight w must be in [0, 1], got 1.5"),
    ("knob nan", [*G, *P, "--verifier", "lenient", "--knob", "nan"], "--knob: nan is not a finite number"),
    ("knob -inf", [*G, *P, "--verifier", "cascade", "--knob=-inf"], "--knob: -inf is not a finite number"),
    ("knob missing", [*G, *P, "--verifier", "lenient"], "verifier 'lenient' needs --knob"),
    ("knob out of range", [*G, *P, "--verifier", "lenient", "--knob", "2"], "lenient's knob lenience l must be in"),
    ("top_p 0", [*G, *P, "--top-p", "0"], "top_p must be in (0, 1], got 0.0"),
    ("K 0", [*G, *P, "-K", "0"], "draft length K must be >= 1, got 0"),
    ("K not an integer", [*G, *P, "-K", "five"], "-K: 'five' is not an integer"),
    ("max_new_tokens 0", [*G, *P, "--max-new-tokens", "0"], "max_new_tokens must be >= 1, got 0"),
    ("batch size 0", [*G, *P, "--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    ("limit 0", [*G, *P, "--limit", "0"], "--limit: must be >= 1, got 0"),
    ("n 0", [*G, "--task", "arith", "-n", "0"], "n (subsample size) must be >= 1, got 0"),
    ("fly with K 1", [*G, *P, "--verifier", "fly", "--knob", "0.5", "-K", "1"], "verifier 'fly' needs K >= 2"),
    # names and choices
    ("verifier unknown", [*G, *P, "--verifier", "beam"], "argument --verifier: invalid choice: 'beam'"),
    ("mixing unknown", [*G, *P, "--verifier", "fixed", "--weight", "0.5", "--mixing", "cubic"],
     "unknown mixing 'cubic'; allowed: linear, logit"),
    ("deferral unknown", [*G, *P, "--verifier", "cascade", "--knob", "0.5", "--deferral", "max"],
     "unknown deferral 'max'; allowed: chow, diff, opt, token"),
    ("deferral without cascade", [*G, *P, "--deferral", "opt"], "deferral is only used by the 'cascade' verifier"),
    ("dtype unknown", [*G, *P, "--dtype", "int4"], "unknown dtype 'int4'"),
    ("task unknown", [*G, "--task", "mmlu"], "unknown task 'mmlu'; allowed:"),
    ("split unknown", [*G, "--task", "arith", "--split", "test"], "unknown split 'test'"),
    ("prompt format unknown", [*G, *P, "--prompt-format", "xml"], "unknown prompt format 'xml'"),
    ("capture unknown", [*G, *P, "--capture", "cuda"], "argument --capture: invalid choice: 'cuda'"),
    # conflicting or missing flags
    ("weight with weight file", [*G, *P, "--verifier", "fixed", "--weight", "0.3", "--weight-file", "{W}/choice.json"],
     "sets weight and mixing: give it or --weight, not both"),
    ("head with strict", [*G, *P, "--head", "{W}/head.safetensors"], "--head is only used by the 'dynamic' verifier"),
    ("judge with strict", [*G, *P, "--judge", "{W}/judge.safetensors"],
     "--judge is only used by the 'judge' verifier"),
    ("dynamic without head", [*G, *P, "--verifier", "dynamic"], "verifier 'dynamic' needs --head"),
    ("no prompts", G, "give prompts with one of --task NAME, --prompts FILE.jsonl or --prompt TEXT"),
    ("two prompt sources", [*G, *P, "--task", "arith"], "give prompts with one of"),
    ("score without task", [*G, *P, "--score"], "--score needs --task"),
    ("keep with interleave", [*G, *P, "--interleave", "--keep", "{W}/kept", "--run", "{W}/r", "verifier=strict"],
     "--keep resumes quality runs"),
    ("interleave without runs", [*G, *P, "--interleave"], "--interleave times several --run runs"),
    ("run-dir with runs", [*G, *P, "--run-dir", "{W}/x", "--run", "{W}/r", "verifier=strict"],
     "with --run, each run names its folder"),
    ("top-k with model sampling", [*G, *P, "--sampling", "model", "--top-k", "5"],
     "sampling 'model' takes top-k and top-p from the target's generation config"),
    # trained files
    ("judge given as head", [*G, *P, "--verifier", "dynamic", "--head", "{W}/judge.safetensors"],
     "is not a weight head file: it is an AutoJudge classifier (--judge)"),
    ("head given as judge", [*G, *P, "--verifier", "judge", "--knob", "0.5", "--judge", "{W}/head.safetensors"],
     "is not an AutoJudge classifier file: it is a weight head (--head)"),
    ("text file as head", [*G, *P, "--verifier", "dynamic", "--head", "{W}/five.txt"],
     "five.txt is not a safetensors file"),
    ("missing head", [*G, *P, "--verifier", "dynamic", "--head", "{W}/nohead.safetensors"],
     "weight head not found: {W}/nohead.safetensors"),
    # weight files
    ("weight file not JSON", [*G, *P, "--verifier", "fixed", "--weight-file", "{W}/notjson.json"],
     "{W}/notjson.json:1: not valid JSON"),
    ("weight file without mixing", [*G, *P, "--verifier", "fixed", "--weight-file", "{W}/nomixing.json"],
     "nomixing.json is not a sweep's choice.json (no 'mixing'"),
    ("weight file missing", [*G, *P, "--verifier", "fixed", "--weight-file", "{W}/nochoice.json"],
     "{W}/nochoice.json does not exist"),
    ("weight file of another family", [*G, *P, "--verifier", "typical", "--weight-file", "{W}/choice.json"],
     "holds no choice for the 'typical' verifier"),
    # prompt files
    ("prompt line is a list", [*G, "--prompts", "{W}/list.jsonl"], "{W}/list.jsonl:2: a JSON list, not an object"),
    ("prompts not UTF-8", [*G, "--prompts", "{W}/latin1.jsonl"], "{W}/latin1.jsonl: not UTF-8 text"),
    ("prompts with one id twice", [*G, "--prompts", "{W}/dup.jsonl"],
     "prompts 1 and 2 have the same id 'a'; each prompt needs its own"),
    ("prompts empty", [*G, "--prompts", "{W}/empty.jsonl"], "{W}/empty.jsonl holds no prompts"),
    ("prompt without text", [*G, "--prompts", "{W}/blank.jsonl"], "prompt 1 has no non-empty \"prompt\" field"),
    ("prompts missing", [*G, "--prompts", "{W}/none.jsonl"], "{W}/none.jsonl does not exist"),
    ("prompts a folder", [*G, "--prompts", "{W}/victim"], "{W}/victim is a folder, not a JSONL file"),
    # labels and run items
    ("label not KEY=VALUE", [*G, *P, "--label", "foo"], "--label 'foo' is not KEY=VALUE"),
    ("run value not a number", [*G, *P, "--run", "{W}/r", "K=five"], "K=five: 'five' is not an integer"),
    ("run value nan", [*G, *P, "--run", "{W}/r", "verifier=fixed", "weight=nan"],
     "weight=nan: value: nan is not a finite number"),
    ("run key unknown", [*G, *P, "--run", "{W}/r", "beam=3"], "unknown key 'beam'"),
    # output folders: nothing of the user's is replaced, nothing is written where it cannot be
    ("run-dir holds a user's files", [*G, *P, "--run-dir", "{W}/victim"],
     "refusing to replace {W}/victim: it holds files and no manifest.json of a run folder"),
    ("run-dir is the working directory", [*G, *P, "--run-dir", "."], "it is the working directory"),
    ("run-dir above the working directory", [*G, *P, "--run-dir", ".."], "a folder above the working directory"),
    ("run-dir is the home folder", [*G, *P, "--run-dir", "{H}"], "it is the home folder"),
    ("run-dir is the package", [*G, *P, "--run-dir", "{PKG}"], "it is diversed's own source folder"),
    ("run-dir is a file", [*G, *P, "--run-dir", "{W}/afile"], "a file or link is there"),
    ("run-dir under a file", [*G, *P, "--run-dir", "{W}/afile/run"], "{W}/afile is a file, not a folder"),
    ("out under a file", [*G, *P, "--out", "{W}/afile/runs"], "{W}/afile is a file, not a folder"),
    ("run of a batch into a user's folder", [*G, *P, "--run", "{W}/victim", "verifier=strict"],
     "refusing to replace {W}/victim"),
    ("job manifest over a user's file", [*G, *P, "--run", "{W}/r", "verifier=strict", "--job", "{W}/afile"],
     "refusing to replace {W}/afile: it is not a job manifest diversed wrote"),
    ("job manifest at a folder", [*G, *P, "--run", "{W}/r", "verifier=strict", "--job", "{W}/victim"],
     "--job {W}/victim is a folder, not a file"),
    ("draft into a user's folder", ["train", "draft", "--target", "{T}", "--draft", "{D}", "--task", "arith",
                                    "--out", "{W}/victim"], "refusing to replace {W}/victim"),
    ("head into a file", [*TH, "--out", "{W}/afile"], "{W}/afile is a file, not a folder"),
    ("tiny pair over a user's folder", ["prepare-models", "--kind", "tiny", "--tiny", "{W}/models"],
     "refusing to replace {W}/models/tiny-target"),
    # training settings
    ("head temperature nan", [*TH, "--out", "{W}/h", "--temperature", "nan"], "--temperature: nan is not a finite"),
    ("head epochs 0", [*TH, "--out", "{W}/h", "--epochs", "0"], "--epochs: must be >= 1, got 0"),
    ("head task unknown", [*TH[:-1], "mmlu", "--out", "{W}/h"], "unknown task 'mmlu'"),
    ("judge labels missing", ["train-judge", "--labels", "{W}/nolabels", "--out", "{W}/j"],
     "{W}/nolabels: no manifest.json"),
    ("tiny draft as deep as its target", ["prepare-models", "--kind", "tiny", "--tiny", "{W}/new", "--draft-layers",
                                          "2"], "the tiny draft keeps 1 to 1 of the target's 2 layers"),
    ("kind unknown", ["prepare-models", "--kind", "huge"], "argument --kind: invalid choice: 'huge'"),
    # sweeps: every point checked before the first decode
    ("sweep knob nan", [*SW, "--lenient", "nan"], "--lenient: nan is not a finite number"),
    ("sweep weight > 1", [*SW, "--weights", "1.5"], "weight w must be in [0, 1], got 1.5"),
    ("sweep mixing unknown", [*SW, "--mixings", "cubic"], "argument --mixings: invalid choice: 'cubic'"),
    ("sweep deferral unknown", [*SW, "--cascade", "0.5", "--deferrals", "max"], "argument --deferrals: invalid"),
    ("sweep knob out of range", [*SW, "--typical", "0.5", "2.0"], "typical's knob epsilon must be in [0, 1], got 2.0"),
    ("sweep judge without file", [*SW, "--judge", "0.5"], "sweeping the judge family needs its classifier"),
    ("sweep judge file as head", [*SW, "--head", "{W}/judge.safetensors"], "is not a weight head file"),
    ("sweep tolerance < 0", [*SW, "--tolerance", "-1"], "--tolerance: must be >= 0, got -1"),
    ("lambda sweep with a judge", ["sweep-lambda", "--target", "{T}", "--draft", "{D}", "--task", "arith", "--heads",
                                   "{W}/judge.safetensors", "--head-out", "{W}/ho", "--out", "{W}/ls"],
     "is not a weight head file: it is an AutoJudge classifier"),
    # scoring: a run folder proves it is whole
    ("score a manifest file", ["score", "{W}/runs/good/manifest.json"], "is a file: give the run's folder"),
    ("score a run cut short", ["score", "{W}/runs/short"], "is not the file {W}/runs/short/manifest.json recorded"),
    ("score another run's rows", ["score", "{W}/runs/other"], "generations.jsonl is not the file"),
    ("score an edited manifest", ["score", "{W}/runs/edited"], "not the good_id it records"),
    ("score no run", ["score", "{W}/victim"], "{W}/victim is not a complete run (no manifest.json)"),
    ("score an empty reference", ["score", "--task", "capitals", "--reference", "", "--completion", "Paris"],
     "a reference is a capital's name or a list of its spellings, got ''"),
    ("score a reference without a number", ["score", "--task", "gsm8k", "--reference", "none", "--completion",
                                            "The answer is 4"], "the reference holds no number (got 'none')"),
    ("score half a completion", ["score", "--task", "capitals", "--reference", "Paris"],
     "--task, --reference and --completion together"),
    ("aggregate a damaged run", ["aggregate", "--runs", "{W}/runs/short", "--out", "{W}/tables"],
     "is not the file {W}/runs/short/manifest.json recorded"),
    # counts of the other commands
    ("calibrate runs -5", ["calibrate", "--runs", "-5"], "--runs: must be >= 1, got -5"),
    ("bench prompts 0", ["bench", "--target", "{T}", "--draft", "{D}", "--num-prompts", "0"],
     "--num-prompts: must be >= 1, got 0"),
    ("bench repeats 0", ["bench", "--target", "{T}", "--draft", "{D}", "--repeats", "0"], "--repeats: must be >= 1"),
    ("bench batch size 0", ["bench", "--target", "{T}", "--draft", "{D}", "--batch-sizes", "1,0"],
     "--batch-sizes 1,0: each size must be >= 1, got 0"),
    # workflow configs, as check-sources reads them (the same validation as the workflow's)
    ("config nan", ["check-sources", "--config", "{W}/nan.yaml"], "temperatures[0]: nan is not a finite number"),
    ("config training nan", ["check-sources", "--config", "{W}/train_nan.yaml"],
     "train_head.temperature: nan is not a finite number"),
    ("config YAML syntax", ["check-sources", "--config", "{W}/syntax.yaml"],
     "config {W}/syntax.yaml:3: not valid YAML"),
    ("config unknown method", ["check-sources", "--config", "{W}/beam.yaml"], "'beam' is not one of"),
    ("config missing", ["check-sources", "--config", "{W}/none.yaml"], "config {W}/none.yaml does not exist"),
]


@pytest.fixture(scope="module")
def workspace(tiny_dir, tmp_path_factory):
    """A user's folder: their notes and folders, trained files of both kinds, prompt and choice files good and bad,
    workflow configs, and runs whole and damaged (decoded once on the tiny pair)."""
    from diversed.decoding.head import Judge, WeightHead
    from diversed.runs.evaluate import score_run
    from diversed.runs.run import RunConfig, execute
    from diversed.runs.settings import Launch

    w = tmp_path_factory.mktemp("workspace")
    (w / "victim" / "sub").mkdir(parents=True)
    (w / "victim" / "notes.txt").write_text("my notes")
    (w / "victim" / "sub" / "data.csv").write_text("1,2\n")
    (w / "models" / "tiny-target").mkdir(parents=True)
    (w / "models" / "tiny-target" / "mine.txt").write_text("not a diversed model")
    (w / "afile").write_text("a file")
    (w / "home").mkdir()
    (w / "cwd" / "deep").mkdir(parents=True)
    WeightHead(64, 64).save(w / "head.safetensors")
    Judge(64, 64).save(w / "judge.safetensors")
    (w / "five.txt").write_text("hello")
    (w / "choice.json").write_text(json.dumps({"weight": 0.5, "mixing": "linear", "families": {}}))
    (w / "nomixing.json").write_text(json.dumps({"weight": 0.5}))
    (w / "notjson.json").write_text("{weight: 0.5")
    (w / "list.jsonl").write_text('{"prompt": "a"}\n["b"]\n')
    (w / "latin1.jsonl").write_bytes('{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    (w / "dup.jsonl").write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    (w / "empty.jsonl").write_text("\n")
    (w / "blank.jsonl").write_text('{"prompt": "  "}\n')
    smoke = yaml.safe_load(Path("config/smoke.yaml").read_text())
    for name, change in (("nan", {"temperatures": [float("nan")]}), ("beam", {"methods": ["beam"]}),
                         ("train_nan", {"train_head": smoke["train_head"] | {"temperature": float("nan")}})):
        (w / f"{name}.yaml").write_text(yaml.safe_dump(smoke | change))
    (w / "syntax.yaml").write_text("pairs:\n  tiny: [unclosed\n")
    cfg = RunConfig(target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"), task="arith", n=2,
                    max_new_tokens=4)
    good = execute(cfg, [{"id": "0", "prompt": "1+1?", "reference": "2", "task": "arith"},
                         {"id": "1", "prompt": "2+2?", "reference": "4", "task": "arith"}],
                   run_dir=w / "runs" / "good", launch=Launch(progress=False))
    score_run(good)
    other = execute(cfg, [{"id": "0", "prompt": "3+3?", "reference": "6", "task": "arith"}],
                    run_dir=w / "runs" / "another", launch=Launch(progress=False))
    for name in ("short", "other", "edited"):
        shutil.copytree(good, w / "runs" / name)
    lines = (good / "generations.jsonl").read_text().splitlines(keepends=True)
    (w / "runs" / "short" / "generations.jsonl").write_text("".join(lines[:-1]))
    shutil.copy(other / "generations.jsonl", w / "runs" / "other" / "generations.jsonl")
    manifest = json.loads((good / "manifest.json").read_text())
    manifest["config"]["task"] = "gsm8k"
    manifest["run_id"] = "good_id"
    (w / "runs" / "edited" / "manifest.json").write_text(json.dumps(manifest))
    return w


def tree(root: Path) -> dict[str, str]:
    """Every file under root by its path, as the sha256 of its bytes (folders by a marker)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("case", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_before_compute(case, args, message, workspace, tiny_dir, monkeypatch,
                                                         capsys):
    import diversed
    import diversed.decoding.models

    def no_model(*_a, **_k):
        raise AssertionError("a model was loaded: the input was not checked first")

    monkeypatch.setattr(diversed.decoding.models, "load_model", no_model)
    monkeypatch.setenv("HOME", str(workspace / "home"))
    monkeypatch.chdir(workspace / "cwd" / "deep")  # a user's working directory: "." and ".." are theirs
    names = {"{W}": str(workspace), "{T}": str(tiny_dir / "tiny-target"), "{D}": str(tiny_dir / "tiny-draft-l1"),
             "{H}": str(workspace / "home"), "{PKG}": str(Path(diversed.__file__).parent)}

    def fill(text: str) -> str:
        for key, value in names.items():
            text = text.replace(key, value)
        return text

    before = tree(workspace)
    with pytest.raises(SystemExit) as e:
        main([fill(a) for a in args])
    err = capsys.readouterr().err
    assert e.value.code == 2, (e.value.code, err)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert fill(message) in err, err
    assert tree(workspace) == before  # nothing written, nothing removed


def test_the_table_covers_sixty_cases_and_every_command():
    assert len(CASES) >= 60
    commands = {args[0] for _, args, _ in CASES}
    assert commands >= {"generate", "train", "train-judge", "prepare-models", "sweep-weight", "sweep-lambda", "score",
                        "aggregate", "calibrate", "bench", "check-sources"}

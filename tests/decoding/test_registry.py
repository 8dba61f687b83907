"""The verifier registry is complete: one `Rule` added to diversed.decoding.settings.RULES, and nothing else, reaches
the command line's choices and flags, the config schema, the plan's runs and sweep families, the engine, the
figures' legends and the report's names. The test adds a toy rule to a copy of the package's source and checks each
in a fresh interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

from helpers import ROOT

CHECKS = textwrap.dedent('''
    SMOKE = {smoke!r}
    import yaml
    from diversed.decoding.settings import FAMILIES, METHODS, RULES, VERIFIERS
    assert RULES["toy"].label == "Toy rule" and "toy" in VERIFIERS and "toy" in FAMILIES and "toy" in METHODS

    # the command line: a verifier choice, and a family flag of sweep-weight
    from diversed.cli import build_parser
    parser = build_parser()
    args = parser.parse_args(["generate", "--verifier", "toy", "--knob", "0.5", "--prompt", "x"])
    assert args.verifier == "toy" and args.knob == 0.5
    assert parser.parse_args(["sweep-weight", "--task", "arith", "--out", "o", "--toy", "0.2", "0.4"]).toy == [0.2, 0.4]

    # the config schema and the plan: a method, its knob values checked, its sweep points and runs
    from diversed.experiment.plan import Plan
    smoke = yaml.safe_load(open(SMOKE))
    config = smoke | {"methods": [*smoke["methods"], "toy"],
                      "sweep": smoke["sweep"] | {"families": smoke["sweep"]["families"] | {"toy": [0.5]}}}
    plan = Plan(config)
    assert {r.method for r in plan.runs if r.rule == "decode"} >= {"toy"}
    assert any(r.verifier == "toy" and r.changes == {"knob": 0.5} for r in plan.runs if r.rule == "sweep")
    try:
        Plan(config | {"sweep": config["sweep"] | {"families": {"toy": [2.0]}}})  # its knob lies in [0, 1]
        raise AssertionError("a toy knob of 2 passed the schema")
    except ValueError as e:
        assert "toy" in str(e)

    # the engine: the rule decodes (its weight is strict's, so its tokens are strict's)
    import torch
    from diversed.decoding.engine import speculative_generate
    from diversed.decoding.models import truncated_draft
    from diversed.decoding.settings import Decoding, Sampling
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2)).eval()
    target.generation_config.eos_token_id = None
    draft = truncated_draft(target, 1)
    out = {v: speculative_generate(target, draft, [1, 5, 9], Decoding(v, K=3, max_new_tokens=12, knob=knob,
                                   sampling=Sampling(1.0)), seed=0).tokens
           for v, knob in (("toy", 0.5), ("strict", None))}
    assert out["toy"] == out["strict"], out

    # the tables, the claims, the figures and the report: its name, its front, its legend entry
    from diversed.analysis.tables import FRONT_METHODS
    from diversed.report.figures import COLORS, MARKERS
    assert METHODS["toy"] == "Toy rule" and "toy" in FRONT_METHODS and "toy" in COLORS and "toy" in MARKERS
    print("toy rule found everywhere")
''')


def test_one_rule_reaches_every_consumer(tmp_path):
    package = tmp_path / "diversed"
    shutil.copytree(ROOT / "diversed", package, ignore=shutil.ignore_patterns("__pycache__"))
    settings = package / "decoding" / "settings.py"
    text = settings.read_text()
    anchor = "RULES: dict[str, Rule] = {\n"
    assert anchor in text
    settings.write_text(text.replace(anchor, anchor + '    "toy": Rule("Toy rule", "ones", knob="toy knob"),\n'))
    checks = CHECKS.replace("{smoke!r}", repr(str(ROOT / "config" / "smoke.yaml")))
    done = subprocess.run([sys.executable, "-c", checks], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path),
                          "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "toy rule found everywhere" in done.stdout, (done.stdout + done.stderr)[-4000:]

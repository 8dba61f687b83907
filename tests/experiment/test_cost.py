"""Computed GPU memory of the paper's jobs: every pair has an estimate, Gemma's distillation fits one 80 GB GPU,
and the architectures the estimate reads reproduce the models' published parameter counts."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers import ROOT

from diversed.experiment.config import Pair
from diversed.experiment.cost import GB, JOBS, LONGEST_PROMPT, MODELS, estimate, table, total, workloads
from diversed.experiment.plan import Plan, load

PAPER = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
PAIRS = PAPER["pairs"] | yaml.safe_load((ROOT / "config" / "paper-gemma.yaml").read_text())["pairs"]  # Gemma opt-in
TYPED = {name: Pair(**p) for name, p in PAIRS.items()}


def test_every_paper_pair_has_an_estimate_for_every_job():
    assert set(PAPER["pairs"]) == {"llama", "qwen"} and set(PAIRS) == {"llama", "qwen", "gemma"}
    for p in PAIRS.values():
        sizes = [total(estimate(p["target"], p["draft"], job, dtype=p["dtype"])) / GB for job in JOBS]
        assert all(10 < s < 80 for s in sizes), sizes
    text = table(TYPED)
    assert len(text.splitlines()) == 2 + 3 and "| gemma | google/gemma-3-12b-it / google/gemma-3-4b-it |" in text


def test_each_task_is_estimated_at_its_longest_prompt():
    """A decode holds its task's longest prompt (raw CNN/DM articles are not cut); training prompts are cut at
    max_prompt_tokens (512 in the paper config); the memory table names the task that sets each job's peak."""
    plan = load(ROOT / "config" / "paper.yaml")
    loads = workloads(plan)
    assert set(loads) == set(plan.tasks)
    cnndm, gsm8k = loads["cnndm"], loads["gsm8k"]
    assert cnndm.tokens == LONGEST_PROMPT["cnndm"] + 128 and cnndm.decode_batch == 32 and cnndm.train_tokens == 640
    qwen = PAPER["pairs"]["qwen"]
    decode = [total(estimate(qwen["target"], qwen["draft"], "decode", load=w)) for w in (cnndm, gsm8k)]
    assert decode[0] > decode[1] + 20 * GB  # 32 rows of 3,128 tokens in two static caches
    assert estimate(qwen["target"], qwen["draft"], "train_head", load=cnndm) == estimate(
        qwen["target"], qwen["draft"], "train_head", load=loads["xsum"])  # both cut at 512
    assert "GB (cnndm) |" in table({k: TYPED[k] for k in PAPER["pairs"]}, loads).splitlines()[3]


def test_a_pair_with_its_own_batch_size_decodes_and_is_priced_at_it():
    """paper-gemma.yaml gives Gemma 16 rows (32 long articles would not fit 80 GB): its quality decodes run at 16,
    the other pairs' at the config's 32, timed runs at 1; the memory table prices each pair at its own rows."""
    plan = load(ROOT / "config" / "paper.yaml", ROOT / "config" / "paper-gemma.yaml")
    batches = {(r.pair, r.batch_size) for job in plan.jobs for r in job.runs}
    assert batches == {("llama", 32), ("qwen", 32), ("gemma", 16), ("llama", 1), ("qwen", 1), ("gemma", 1)}
    assert {j.flags["batch"] for j in plan.of("decode") if j.pair == "gemma"} == {"16"}
    rows = table(plan.pairs, workloads(plan)).splitlines()
    gemma = float(rows[4].split("|")[3].split()[0])
    assert 60 < gemma < 80  # at 32 rows: 96 GB


def test_gemma_distillation_fits_one_80_gb_gpu():
    """Regression: a float32 student with float32 AdamW beside the bfloat16 12B target (and a second, unused draft
    copy) needed ~100 GB; the bfloat16 student with AdamW16 needs under 60."""
    gemma = PAIRS["gemma"]
    lean = estimate(gemma["target"], gemma["draft"], "distill", dtype="bfloat16")
    assert total(lean) < 60 * GB
    float32_student = estimate(gemma["target"], gemma["draft"], "distill", dtype="float16")  # trains in float32
    assert total(float32_student) + MODELS[gemma["draft"]].params * 2 > 95 * GB  # + the second copy: ~100 GB
    assert lean["optimizer"] == 2 * lean["gradients"]  # two bfloat16 moments, no float32 copy


def test_unknown_model_or_job_is_refused():
    with pytest.raises(ValueError, match="no memory estimate for 'org/other'; known models: meta-llama"):
        estimate("org/other", "Qwen/Qwen3-0.6B", "decode")
    with pytest.raises(ValueError, match="unknown job 'serve'"):
        estimate("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "serve")


# the rest of each public config.json: tied embeddings; Gemma 3's SigLIP vision tower (so400m, 896 px, patch 14)
TIED = {"meta-llama/Llama-3.1-8B-Instruct": False, "meta-llama/Llama-3.2-1B-Instruct": True,
        "Qwen/Qwen3-8B": False, "Qwen/Qwen3-0.6B": True, "google/gemma-3-12b-it": True, "google/gemma-3-4b-it": True}
SIGLIP = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
          "image_size": 896, "patch_size": 14}


@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_reproduces_the_published_parameter_count(name):
    from transformers import (
        AutoModelForCausalLM,
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        LlamaConfig,
        Qwen3Config,
        SiglipVisionConfig,
    )

    a = MODELS[name]
    shape = {"vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.intermediate,
             "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
             "head_dim": a.head_dim, "tie_word_embeddings": TIED[name]}
    with torch.device("meta"):
        if name.startswith("google/"):
            model = Gemma3ForConditionalGeneration(Gemma3Config(text_config=Gemma3TextConfig(**shape),
                                                                vision_config=SiglipVisionConfig(**SIGLIP)))
        else:
            model = AutoModelForCausalLM.from_config((LlamaConfig if "llama" in name else Qwen3Config)(**shape))
    counts = {"all": 0, "vision": 0}
    for key, p in model.named_parameters():
        counts["all"] += p.numel()
        counts["vision"] += p.numel() if "vision" in key or "multi_modal" in key else 0
    assert counts["all"] == pytest.approx(a.params, rel=0.01)
    assert counts["vision"] == pytest.approx(a.vision, rel=0.02)


def test_forward_times_and_gpu_hours_follow_the_stated_model():
    from diversed.experiment.cost import TEXT_BATCH, disk_gb, forward_ms, gpu_hours, step_ms, token_ms

    # the per-token times the SLURM profile's time limits assume
    assert [round(forward_ms(MODELS[m])) for m in ("google/gemma-3-12b-it", "google/gemma-3-4b-it",
                                                   "meta-llama/Llama-3.1-8B-Instruct")] == [28, 14, 19]
    pair = PAIRS["qwen"]
    config = {"pairs": {"qwen": pair}, "methods": ["autoregressive", "strict", "fixed"], "temperatures": [1.0],
              "K": [5], "seeds": [0, 1], "transfer": [{"head": "arith", "eval": "open"}], "batch_size": 4,
              "tasks": {"arith": {"n_eval": 10, "n_dev": 4, "n_train": 6, "max_new_tokens": 20, "n_timing": 3},
                        "open": {"n_eval": 5, "n_dev": 4, "n_train": 6, "max_new_tokens": 20, "n_timing": 3}},
              "sweep": {"weights": [0.5, 1.0], "mixings": ["linear", "logit"], "figure_K": [3],
                        "figure_tasks": ["arith"]},
              "train_head": {"epochs": 2, "max_new_tokens": 8, "batch_size": 2}, "distill": {"max_new_tokens": 8}}
    t, d = MODELS[pair["target"]], MODELS[pair["draft"]]
    plan = Plan(config)
    ctx = 256 + 10  # a task's prompt (tasks other than the paper's: 256 tokens) and half its completion

    def spec(K, rows):
        return token_ms(t, d, K=K, rows=rows, context=ctx)

    def alone(m, rows):
        return step_ms(m, rows, 1, ctx) / rows

    h = {rule: v * 3.6e6 for rule, v in gpu_hours(plan, "qwen").items()}  # ms
    # quality decodes at batch 4: 2 seeds x (10 + 5) prompts x 20 tokens x (target alone + 2 speculative runs), and
    # the transfer run on open
    assert h["decode"] == pytest.approx(2 * 15 * 20 * (alone(t, 4) + 2 * spec(5, 4)) + 2 * 5 * 20 * spec(5, 4))
    assert h["time"] == pytest.approx(2 * 3 * 20 * (alone(t, 1) + 2 * spec(5, 1)))  # 3 timed prompts, batch 1
    # 3 points (strict, 0.5 linear, 0.5 logit) and the target alone: arith and open at (T = 1, K = 5), and arith at
    # the figure's K = 3, batched
    assert h["sweep"] == pytest.approx(3 * 4 * 20 * (2 * spec(5, 4) + spec(3, 4)) + 3 * 4 * 20 * alone(t, 4))
    # the sweeps the runs read (arith and open at K = 5) timed: 3 points and the target alone on 3 dev prompts, batch 1
    assert h["time_sweep"] == pytest.approx(2 * 3 * 20 * (3 * spec(5, 1) + alone(t, 1)))
    # the jobs the DAG has: one head (arith's, which the transfer run reads; no dynamic method), no fine-tuned draft
    assert h["train_head"] == pytest.approx(6 * 2 * 8 * (alone(t, 2) + alone(d, 2)))
    assert h["distill_draft"] == 0
    with_finetuned = Plan(config | {"methods": [*config["methods"], "finetuned"]})
    assert gpu_hours(with_finetuned, "qwen")["distill_draft"] * 3.6e6 == pytest.approx(2 * 6 * 8 * alone(t, TEXT_BATCH))
    assert disk_gb(plan, "qwen") == pytest.approx((MODELS[pair["target"]].params + MODELS[pair["draft"]].params) * 2
                                                    / GB)  # no finetuned method: no fine-tuned drafts


def test_a_batched_step_costs_little_more_than_one_row_until_compute_bound():
    """A forward of B rows reads the weights once: memory-bound at small B (a batch of 16 costs ~1.1 of one row on
    an 8B model), compute-bound past F b / 2 BW rows; speculative decoding stops paying at a batch size that grows
    with tau and
    never comes at a low tau (computed, labelled so in the README)."""
    from diversed.experiment.cost import crossover, step_ms

    llama = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    assert step_ms(llama, 16, 1, 512) < 1.2 * step_ms(llama, 1, 1, 512)
    assert step_ms(llama, 1024, 1, 0) > 2 * step_ms(llama, 1, 1, 0)  # compute-bound: 2 x 8e9 x 1024 flops / 4e14
    pair = PAIRS["llama"]
    at = {tau: crossover(pair["target"], pair["draft"], tau=tau) for tau in (1.5, 3.0, 4.0, 5.0)}
    assert at[1.5] == 1, at  # 5 eager draft steps for 1.5 tokens never pay, whatever the batch
    assert 1 < at[3.0] < at[4.0] < at[5.0] < 1024, at


def test_the_paper_config_evaluates_full_test_sets_for_fewer_gpu_hours_than_batch_1_at_200_prompts():
    """Batched quality decoding: the full GSM8K and MBPP test sets and 1,000 CNN/DM and XSum articles cost less
    (computed) than the batch-1 run of 200 prompts each did (about 350 GPU-hours for the three pairs)."""
    from diversed.experiment.cost import gpu_hours

    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    tasks = config["tasks"]
    assert tasks["gsm8k"]["n_eval"] >= 1319 and tasks["mbpp"]["n_eval"] >= 500
    assert tasks["cnndm"]["n_eval"] >= 1000 and tasks["xsum"]["n_eval"] >= 1000
    batched = sum(sum(gpu_hours(Plan(config), p).values()) for p in config["pairs"])
    before = Plan(config | {"batch_size": 1, "tasks": {k: v | {"n_eval": 200} for k, v in tasks.items()}})
    assert batched < sum(sum(gpu_hours(before, p).values()) for p in config["pairs"]) / 2

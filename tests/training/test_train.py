"""Head training: the REINFORCE gradient goes where the reward is, the acceptance term raises acceptance
(and would fail with the authors' sign bug), and a killed run resumes to the same head."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from helpers import ROOT

from diversed.decoding.head import WeightHead, load_head
from diversed.decoding.verifiers import ensemble
from diversed.training.train import (
    HeadTrainConfig,
    Interrupted,
    Rollout,
    collapse,
    load_log,
    make_optimizer,
    reinforce_loss,
    train_head,
)

V, H, T = 6, 4, 8


def toy_rollouts(head: WeightHead, batch: int, gen: torch.Generator) -> list[Rollout]:
    """p favours token 0, q favours token 1; tokens are sampled from nu with the current head."""
    p = torch.tensor([0.85, 0.03, 0.03, 0.03, 0.03, 0.03]).expand(T, V)
    q = torch.tensor([0.03, 0.85, 0.03, 0.03, 0.03, 0.03]).expand(T, V)
    out = []
    for _ in range(batch):
        h_t, h_d = torch.randn(T, H, generator=gen), torch.randn(T, H, generator=gen)
        with torch.no_grad():
            nu = ensemble(p, q, head(h_t, h_d), "linear")
        tokens = torch.multinomial(nu, 1, generator=gen)[:, 0]
        out.append(Rollout(tokens, p.log(), q.log(), h_t, h_d))
    return out


def train_toy(reward_token: int | None, acceptance_weight: float, steps: int = 150) -> tuple[float, float, float]:
    """Returns (mean w, expected acceptance) before and after training on the toy problem."""
    head = WeightHead(H, H)
    opt, sched = make_optimizer(head, HeadTrainConfig(lr=0.05, warmup_frac=0.0), steps)
    gen = torch.Generator().manual_seed(0)
    baseline, first = None, None
    for _ in range(steps):
        rollouts = toy_rollouts(head, 8, gen)
        if reward_token is None:
            rewards = torch.zeros(8)
        else:
            rewards = torch.stack([(r.tokens == reward_token).float().mean() for r in rollouts])
        baseline = float(rewards.mean()) if baseline is None else 0.9 * baseline + 0.1 * float(rewards.mean())
        loss, stats = reinforce_loss(head, rollouts, rewards, baseline, acceptance_weight=acceptance_weight,
                                     mixing="linear")
        first = first or stats
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return first["mean_w"], stats["mean_w"], first["expected_acceptance"], stats["expected_acceptance"]


def test_reward_for_target_tokens_drives_w_to_one():
    w0, w1, _, _ = train_toy(reward_token=0, acceptance_weight=0.0)
    assert w0 == pytest.approx(0.5) and w1 > 0.9


def test_reward_for_draft_tokens_drives_w_to_zero():
    _, w1, _, _ = train_toy(reward_token=1, acceptance_weight=0.0)
    assert w1 < 0.1


def test_acceptance_term_raises_expected_acceptance_with_zero_reward():
    """Sum_v min(q, nu) = 1 - w TV(p, q): with zero reward only the acceptance term acts, and it must raise
    acceptance. With the sign flipped (the authors' bug) acceptance falls instead; we check that too."""
    _, w1, acc0, acc1 = train_toy(reward_token=None, acceptance_weight=0.1, steps=60)
    assert acc1 > acc0 + 0.1 and w1 < 0.5
    _, w_bug, acc0_bug, acc1_bug = train_toy(reward_token=None, acceptance_weight=-0.1, steps=60)
    assert acc1_bug < acc0_bug and w_bug > 0.5


@pytest.fixture(scope="module")
def tiny_pair(tiny_dir):
    from diversed.decoding.models import load_pair

    return load_pair(str(tiny_dir / "tiny-target"), str(tiny_dir / "tiny-draft-l1"))


def config(**kw) -> HeadTrainConfig:
    return HeadTrainConfig(task="arith", n_train=6, epochs=2, batch_size=2, max_new_tokens=6, rollout="sample",
                           reward="fidelity", **kw)


@pytest.mark.parametrize(("ws", "stds", "why"), [
    ([0.5, 0.3, 0.04, 0.01], [0.5] * 4, "mean w below 0.05 over the last 2 steps"),
    ([0.5, 0.9, 0.96, 0.99], [0.5] * 4, "mean w above 0.95 over the last 2 steps"),
    ([0.5, 0.4, 0.3, 0.2], [0.0, 0.0, 0.0, 0.5], "batch rewards without variance on 3 of 4 steps"),
    ([0.5, 0.02, 0.3, 0.2], [0.0, 0.5, 0.0, 0.5], ""),
])
def test_a_collapsed_head_is_flagged(ws, stds, why):
    """A head pinned at the draft (w -> 0) or at strict (w -> 1), or trained on rewards that never differ within a
    batch, is flagged; a head that moves and is rewarded unequally is not."""
    assert collapse([{"mean_w": w, "reward_std": s} for w, s in zip(ws, stds, strict=True)]) == why


def test_train_head_end_to_end_and_resume(tiny_pair, tmp_path):
    cfg = config()
    full = train_head(cfg, tmp_path / "full", pair=tiny_pair, progress=False)
    log = load_log(tmp_path / "full" / "train_log.csv")
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert {"reward", "reward_std", "expected_acceptance", "mean_w", "loss"} <= log[0].keys()
    manifest = json.loads((tmp_path / "full" / "manifest.json").read_text())
    assert manifest["steps"] == 6 and "git_commit" in manifest
    assert manifest["collapsed"] == (collapse(log) or None) and "reward_varied" in manifest["final"]

    def kill_after_3(step):
        if step == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        train_head(cfg, tmp_path / "killed", pair=tiny_pair, progress=False, on_step=kill_after_3)
    assert not (tmp_path / "killed" / "head.safetensors").exists()  # nothing that looks finished
    resumed = train_head(cfg, tmp_path / "killed", pair=tiny_pair, progress=False)
    a, b = load_head(full, tiny_pair.target, tiny_pair.draft), load_head(resumed, tiny_pair.target, tiny_pair.draft)
    assert torch.equal(a.proj.weight, b.proj.weight) and not torch.all(a.proj.weight == 0)
    def untimed(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert untimed(load_log(tmp_path / "killed" / "train_log.csv")) == untimed(log)  # same curve, step for step


def test_trained_head_runs_in_the_engine(tiny_pair, tmp_path):
    from diversed.decoding.engine import speculative_generate
    from diversed.decoding.settings import Decoding, Sampling

    path = train_head(config(), tmp_path, pair=tiny_pair, progress=False)
    head = load_head(path, tiny_pair.target, tiny_pair.draft)
    out = speculative_generate(tiny_pair.target, tiny_pair.draft, [1, 20, 30],
                               Decoding(verifier="dynamic", K=3, max_new_tokens=10,
                                        sampling=Sampling(1.0)), trained=head, seed=0)
    assert len(out.tokens) == 10


def test_checkpoint_of_another_config_is_refused(tiny_pair, tmp_path):
    def stop(step):
        raise Interrupted

    with pytest.raises(Interrupted):
        train_head(config(), tmp_path, pair=tiny_pair, progress=False, on_step=stop)
    with pytest.raises(ValueError, match="another training config"):
        train_head(config(lr=1e-3), tmp_path, pair=tiny_pair, progress=False)
    (tmp_path / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt"):
        train_head(config(), tmp_path, pair=tiny_pair, progress=False)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("reward", "bleu", "reward: 'bleu' is not one of task, fidelity"), ("task", "mmlu", "unknown task"),
    ("batch_size", 0, "batch_size: must be >= 1, got 0"), ("lr", float("nan"), "lr: nan is not a finite number"),
    ("rollout", "beam", "rollout: 'beam' is not one of greedy, sample"),
])
def test_bad_training_config(field, value, message):
    with pytest.raises(ValueError, match=message):
        HeadTrainConfig(**{field: value}).validate()


def test_distilled_draft_moves_toward_target_and_is_a_usable_draft(tiny_dir, tmp_path):
    from diversed.decoding.engine import speculative_generate
    from diversed.decoding.models import load_pair
    from diversed.decoding.settings import Decoding, Sampling
    from diversed.training.finetune import distill_draft, kl_loss
    from diversed.training.settings import DistillConfig

    target, draft = str(tiny_dir / "tiny-target"), str(tiny_dir / "tiny-draft-l1")
    cfg = DistillConfig(task="arith", target=target, draft=draft, n_train=4, max_new_tokens=16, epochs=3, lr=3e-3)
    out = distill_draft(cfg, tmp_path / "ft", progress=False)
    log = load_log(out / "train_log.csv")
    assert len(log) == 12

    def epoch_kl(e):
        return sum(r["kl"] for r in log if r["epoch"] == e) / 4

    assert epoch_kl(2) < 0.8 * epoch_kl(0)  # the same target text, fitted better
    after = load_pair(target, str(out))
    assert kl_loss(torch.zeros(2, 5), torch.zeros(2, 5)) == 0
    gen = speculative_generate(after.target, after.draft, [1, 20, 30], Decoding(verifier="strict", K=3,
                                                                                max_new_tokens=8, sampling=Sampling(0)))
    assert len(gen.tokens) == 8


def test_resume_after_the_last_checkpoint_finishes(tiny_pair, tmp_path):
    """Killed after the last step's checkpoint, before the head is saved: the rerun saves the same head."""
    full = train_head(config(), tmp_path / "full", pair=tiny_pair, progress=False)

    def kill_at_end(step):
        if step == 6:
            raise Interrupted

    with pytest.raises(Interrupted):
        train_head(config(), tmp_path / "killed", pair=tiny_pair, progress=False, on_step=kill_at_end)
    resumed = train_head(config(), tmp_path / "killed", pair=tiny_pair, progress=False)
    a, b = load_head(full, tiny_pair.target, tiny_pair.draft), load_head(resumed, tiny_pair.target, tiny_pair.draft)
    assert torch.equal(a.proj.weight, b.proj.weight)


@pytest.fixture(scope="module")
def padded_draft_dir(tiny_dir, tmp_path_factory):
    """The tiny draft with its head padded to a wider vocabulary: same tokenizer, so load_pair accepts the pair."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("padded") / "draft"
    model = AutoModelForCausalLM.from_pretrained(tiny_dir / "tiny-draft-l1")
    model.resize_token_embeddings(160)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_dir / "tiny-draft-l1").save_pretrained(out)
    return out


def test_head_training_and_distillation_on_a_padded_pair(tiny_dir, padded_draft_dir, tmp_path):
    from diversed.decoding.models import load_pair, vocab_size
    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig

    target = str(tiny_dir / "tiny-target")
    pair = load_pair(target, str(padded_draft_dir))
    assert pair.vocab_size == 160 and vocab_size(pair.target) == 128
    train_head(config(), tmp_path / "head", pair=pair, progress=False)
    cfg = DistillConfig(task="arith", target=target, draft=str(padded_draft_dir), n_train=2, max_new_tokens=6,
                        epochs=1)
    out = distill_draft(cfg, tmp_path / "ft", progress=False)
    assert len(load_log(out / "train_log.csv")) == 2


@pytest.mark.slow
def test_paper_config_trains_on_128_tokens_and_decodes_at_the_task_length(tmp_path):
    """Regression: head training and distillation used each task's eval length (256 for GSM8K and MBPP); the
    paper trains on 128 (train_head.max_new_tokens, distill.max_new_tokens)."""
    import re

    import yaml
    from helpers import snakemake, workflow_copy

    wd = workflow_copy(tmp_path)
    config = yaml.safe_load((wd / "config" / "paper.yaml").read_text())
    config["tasks"]["gsm8k"]["max_new_tokens"] = 256  # a decode length other than the training's
    (wd / "longer.yaml").write_text(yaml.safe_dump(config))
    done = snakemake("-n", "--forceall", "-p", "--configfile", "longer.yaml", cwd=wd)
    lengths = {}  # command -> {(task, --max-new-tokens)}
    for line in done.stdout.splitlines():
        if command := re.search(r"\bdiversed (train head|train draft|generate) ", line):
            task = re.search(r"--task (\w+)", line).group(1)
            lengths.setdefault(command.group(1), set()).add((task, int(re.search(r"--max-new-tokens (\d+)",
                                                                                   line).group(1))))
    tasks = config["tasks"]
    assert {v["max_new_tokens"] for v in tasks.values()} == {128, 256}  # GSM8K decodes 256 here
    assert lengths["train head"] == lengths["train draft"] == {(t, 128) for t in tasks}
    assert lengths["generate"] == {(t, v["max_new_tokens"]) for t, v in tasks.items()}


@pytest.fixture(scope="module")
def gemma_dirs(tmp_path_factory):
    """A tiny Gemma 3 pair of the paper's class (Gemma3ForConditionalGeneration), saved with the char tokenizer."""
    from helpers import tiny_paper_model

    from diversed.decoding.models import char_tokenizer

    root = tmp_path_factory.mktemp("gemma")
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        tiny_paper_model("gemma3", seed, layers=layers).save_pretrained(root / name)
        char_tokenizer().save_pretrained(root / name)
    return str(root / "target"), str(root / "draft")


def test_distillation_loads_the_pair_once_and_trains_the_draft_in_bfloat16(gemma_dirs, tmp_path, monkeypatch):
    """Regression: distillation held the pair's draft and a second, float32 copy trained with float32 AdamW
    (Gemma 3: ~100 GB with the 12B target; out of memory on an 80 GB GPU)."""
    from safetensors.torch import load_file
    from transformers import PreTrainedModel

    import diversed.decoding.models
    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig

    loads, checkpointed = [], []
    load_model = diversed.decoding.models.load_model
    monkeypatch.setattr(diversed.decoding.models, "load_model",
                        lambda name, **kw: loads.append(kw["role"]) or load_model(name, **kw))
    name = "activation_checkpointing_enable" if hasattr(PreTrainedModel, "activation_checkpointing_enable") else \
        "gradient_checkpointing_enable"  # transformers 5.17's name (diversed.compat)
    enable = getattr(PreTrainedModel, name)
    monkeypatch.setattr(PreTrainedModel, name,
                        lambda self, *a, **kw: checkpointed.append(type(self).__name__) or enable(self, *a, **kw))
    target, draft = gemma_dirs
    cfg = DistillConfig(task="arith", target=target, draft=draft, n_train=3, max_new_tokens=8, epochs=3, lr=3e-3,
                        dtype="bfloat16")
    out = distill_draft(cfg, tmp_path / "ft", progress=False)
    assert sorted(loads) == ["draft", "target"]  # one draft: the pair's own is the student
    assert checkpointed == ["Gemma3ForConditionalGeneration"]
    before, after = load_file(f"{draft}/model.safetensors"), load_file(out / "model.safetensors")
    assert {t.dtype for t in after.values()} == {torch.bfloat16}
    changed = [k for k, t in after.items() if not torch.equal(t, before[k].to(t.dtype))]
    assert changed and all("vision" not in k for k in changed)  # text-only training leaves the vision tower
    log = load_log(out / "train_log.csv")
    assert sum(r["kl"] for r in log if r["epoch"] == 2) < 0.8 * sum(r["kl"] for r in log if r["epoch"] == 0)


def test_adamw16_is_adamw_with_unbiased_bfloat16_steps():
    """AdamW16 takes AdamW's steps; in bfloat16 a step below the resolution moves a weight on average (rounding
    to nearest would leave 1.0 at 1.0: its neighbours are 1 - 2^-8 and 1 + 2^-7)."""
    from diversed.training.finetune import AdamW16

    gen = torch.Generator().manual_seed(0)
    w = (0.05 * torch.randn(64, 32, generator=gen)).to(torch.bfloat16).float()  # bfloat16 resolution <= 2^-10
    a, b = w.clone().requires_grad_(True), w.to(torch.bfloat16).requires_grad_(True)
    opt_a, opt_b = torch.optim.AdamW([a], lr=1e-2), AdamW16([b], lr=1e-2)
    for _ in range(5):
        g = torch.randn(64, 32, generator=gen)
        a.grad, b.grad = g, g.to(torch.bfloat16)
        opt_a.step(), opt_b.step()
    assert (a - w).abs().mean() > 0.02 and (a - b.float()).abs().max() < 0.005  # within a few rounding steps

    ones = torch.ones(200_000, dtype=torch.bfloat16, requires_grad=True)
    ones.grad = torch.ones_like(ones)
    AdamW16([ones], lr=1e-3, weight_decay=0.0).step()  # one step of exactly -lr
    assert abs(ones.float().mean().item() - (1 - 1e-3)) < 5e-5 and set(ones.unique().tolist()) == {1 - 2 ** -8, 1.0}
    p = torch.zeros(3, requires_grad=True)
    p.grad = torch.ones(3)
    with pytest.raises(ValueError, match="bfloat16 weights, got torch.float32"):
        AdamW16([p], lr=1e-3).step()


def test_relative_acceptance_term_is_a_fixed_fraction_of_the_reward_loss():
    """acceptance_term relative (the authors'): every step lambda = f |L_reward| / |L_acc|, so the acceptance term
    is f of the reward loss's magnitude whatever their scales; relative_at_zero (default 5, the authors' run
    script 10) on a step without reward loss."""
    from diversed.training.train import acceptance_lambda, sequence_terms

    gen = torch.Generator().manual_seed(0)
    head = WeightHead(H, H)
    rollouts = toy_rollouts(head, 8, gen)
    rewards = torch.stack([(r.tokens == 0).float().mean() for r in rollouts])
    loss, stats = reinforce_loss(head, rollouts, rewards, 0.3, acceptance_weight=0.05, mixing="linear",
                                 acceptance_term="relative")
    terms = [sequence_terms(head, r, "linear") for r in rollouts]
    reward_loss = -(torch.stack([t[0] for t in terms]) * (rewards - 0.3)).mean()
    acc = torch.stack([t[1] for t in terms]).mean()
    assert stats["lambda"] * float(acc) == pytest.approx(0.05 * abs(float(reward_loss)), rel=1e-5)
    assert float(loss) == pytest.approx(float(reward_loss) - 0.05 * abs(float(reward_loss)), rel=1e-5)
    # the same rollouts, rewards 100 times larger: lambda follows the reward loss (a fixed lambda would not)
    _, big = reinforce_loss(head, rollouts, 100 * rewards, 30.0, acceptance_weight=0.05, mixing="linear",
                            acceptance_term="relative")
    assert big["lambda"] == pytest.approx(100 * stats["lambda"], rel=1e-4)
    _, fixed = reinforce_loss(head, rollouts, rewards, 0.3, acceptance_weight=0.05, mixing="linear")
    assert fixed["lambda"] == 0.05
    assert acceptance_lambda("relative", 0.05, torch.tensor(0.0), acc) == 5.0
    assert acceptance_lambda("relative", 0.05, torch.tensor(0.0), acc, at_zero=10.0) == 10.0
    _, zero = reinforce_loss(head, rollouts, torch.full_like(rewards, 0.3), 0.3, acceptance_weight=0.05,
                             mixing="linear", acceptance_term="relative", at_zero=10.0)
    assert zero["lambda"] == 10.0
    with pytest.raises(ValueError, match="acceptance_term: 'scaled' is not one of fixed, relative, authors"):
        HeadTrainConfig(acceptance_term="scaled").validate()


def test_the_authors_acceptance_term_penalises_acceptance_whenever_the_reward_loss_is_not_zero():
    """#47 item 4: their regulariser is -L_acc and their scale 0.05 |L_reward| / (-L_acc + 1e-8): negative, so
    minimising the loss lowers expected acceptance, by a term worth 0.05 |L_reward|; with no reward loss lambda is
    their reg_scale and the term rewards acceptance. Ours (relative) rewards it at the same size."""
    from diversed.training.train import sequence_terms

    gen = torch.Generator().manual_seed(0)
    head = WeightHead(H, H)
    rollouts = toy_rollouts(head, 8, gen)
    rewards = torch.stack([(r.tokens == 0).float().mean() for r in rollouts])
    terms = [sequence_terms(head, r, "linear") for r in rollouts]
    reward_loss = -(torch.stack([t[0] for t in terms]) * (rewards - 0.3)).mean()
    acc = torch.stack([t[1] for t in terms]).mean()
    gradients = {}
    for term in ("relative", "authors"):
        head.zero_grad()
        loss, stats = reinforce_loss(head, rollouts, rewards, 0.3, acceptance_weight=0.05, mixing="linear",
                                     acceptance_term=term)
        r, a = abs(float(reward_loss)), float(acc)
        expected = 0.05 * r / a if term == "relative" else 0.05 * r / (-a + 1e-8)
        assert stats["lambda"] == pytest.approx(expected, rel=1e-6)
        assert float(loss) == pytest.approx(float(reward_loss) + (-1 if term == "relative" else 1) * 0.05 * r,
                                            rel=1e-5)
        (-stats["lambda"] * acc).backward(retain_graph=True)  # the acceptance term alone
        gradients[term] = head.proj.weight.grad.clone()
    # one step along each: the authors' term moves the weights against acceptance, ours with it
    assert torch.allclose(gradients["authors"], -gradients["relative"], rtol=1e-4, atol=1e-12)
    _, zero = reinforce_loss(head, rollouts, torch.full_like(rewards, 0.3), 0.3, acceptance_weight=0.05,
                             mixing="linear", acceptance_term="authors", at_zero=10.0)
    assert zero["lambda"] == 10.0  # no reward loss: their reg_scale, rewarding acceptance


def test_the_authors_schedule_cycles_after_its_warm_up():
    """#47 item 5: LinearLR from 0.1 over 10 steps, then cosine with T_max = 400 // 32 - 10 = 2, stepped every
    batch: 5e-4, 2.5e-4, 0, 2.5e-4, 5e-4, ... to the end (ours decays once)."""
    head = WeightHead(H, H)
    rates = {}
    for schedule in ("authors", "cosine"):
        opt, sched = make_optimizer(head, HeadTrainConfig(schedule=schedule, n_train=400), 100)
        rates[schedule] = []
        for _ in range(100):
            rates[schedule].append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    authors = rates["authors"]
    assert authors[0] == pytest.approx(5e-5) and authors[9] == pytest.approx(4.55e-4)
    assert authors[10:18] == pytest.approx([5e-4, 2.5e-4, 0, 2.5e-4] * 2, abs=1e-12)
    assert authors[99] == pytest.approx(2.5e-4) and sum(r == pytest.approx(0, abs=1e-12) for r in authors) == 22
    cosine = rates["cosine"]
    assert all(a >= b for a, b in itertools.pairwise(cosine[10:]))  # ours: one decay after warm-up


def test_sft_draft_learns_the_reference_answers(tiny_dir, tmp_path):
    """finetune sft (the authors' fine-tuned draft): cross-entropy on the reference answers, no target text; the
    draft's loss on them falls and the run records its recipe."""
    import json as json_

    from helpers import hub_row

    from diversed.training.finetune import distill_draft
    from diversed.training.settings import DistillConfig

    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json_.dumps(hub_row("gsm8k", i)) + "\n" for i in range(20)))
    cfg = DistillConfig(task="gsm8k", target=str(tiny_dir / "tiny-target"), draft=str(tiny_dir / "tiny-draft-l1"),
                        data_files=str(data), n_train=4, max_new_tokens=16, epochs=4, lr=3e-3, finetune="sft",
                        prompt_format="raw")
    out = distill_draft(cfg, tmp_path / "sft", progress=False)
    log = load_log(out / "train_log.csv")
    assert len(log) == 16 and "ce" in log[0] and "kl" not in log[0]

    def epoch_ce(e):
        return sum(r["ce"] for r in log if r["epoch"] == e) / 4

    assert epoch_ce(3) < 0.8 * epoch_ce(0)
    assert json_.loads((out / "distill_manifest.json").read_text())["config"]["finetune"] == "sft"
    with pytest.raises(ValueError, match="finetune: 'rl' is not one of distill, sft"):
        DistillConfig(finetune="rl").validate()


def test_training_prompts_keep_their_last_or_their_first_max_prompt_tokens():
    """#32 item 5, #47 item 2: the paper config clips each training prompt to 512 tokens, so that a long article fits
    a batch of rollouts; the authors' tokenizer call keeps the first 512 (BOS kept, the reply's header lost), which
    prompt_keep first reproduces; the embedded default keeps whole prompts."""
    from diversed.experiment.plan import load
    from diversed.training.settings import DistillConfig, HeadTrainConfig

    bos_first = [1, 2, 3, 4, 5]  # 1: BOS
    assert HeadTrainConfig(max_prompt_tokens=3).clip(bos_first) == [3, 4, 5]
    assert HeadTrainConfig(max_prompt_tokens=3, prompt_keep="first").clip(bos_first) == [1, 2, 3]
    with pytest.raises(ValueError, match="prompt_keep: 'middle' is not one of last, first"):
        HeadTrainConfig(prompt_keep="middle").validate()
    assert DistillConfig().clip([1, 2, 3]) == [1, 2, 3]
    with pytest.raises(ValueError, match="max_prompt_tokens: must be >= 1"):
        HeadTrainConfig(task="arith", max_prompt_tokens=0).validate()
    jobs = [j for j in load("config/paper.yaml").jobs if j.rule in ("train_head", "train_head_lambda",
                                                                    "distill_draft")]
    assert jobs and all("--max-prompt-tokens 512" in str(j) for j in jobs)


def test_the_reward_baseline_is_a_running_mean_none_or_the_authors_choice_per_task():
    """baseline none: R - 1; authors: R - 1 where rewards are 0/1 (GSM8K, MBPP, arith), a running mean on graded
    tasks (CNN/DM, XSum), as the authors' code."""
    from diversed.training.train import fixed_baseline

    def fixed(task, baseline):
        return fixed_baseline(HeadTrainConfig(task=task, baseline=baseline))

    assert [fixed(t, "authors") for t in ("gsm8k", "mbpp", "arith", "cnndm", "xsum")] == [True] * 3 + [False] * 2
    assert fixed("cnndm", "none") and not fixed("gsm8k", "mean")
    with pytest.raises(ValueError, match="baseline: 'zero' is not one of mean, none, authors"):
        HeadTrainConfig(baseline="zero").validate()
    with pytest.raises(ValueError, match="scoring: .theirs. is not one of standard, authors"):
        HeadTrainConfig(scoring="theirs").validate()


def test_a_head_decodes_with_the_mixing_it_was_trained_with(tmp_path):
    """A head trained with logit mixing refuses a linear decode (DIVERSED verifies with the ensemble it learnt);
    the sweep's DIVERSED point and the plan's DIVERSED runs carry the head's mixing."""
    from diversed.experiment.plan import load
    from diversed.runs.settings import Grid, RunConfig, trained_mixing

    head = WeightHead(H, H)
    path = tmp_path / "head.safetensors"
    head.save(path, config={"mixing": "logit"})
    assert trained_mixing(path) == "logit" and trained_mixing(tmp_path / "none.safetensors") is None
    with pytest.raises(ValueError, match="trained with logit mixing: decode it with --mixing logit"):
        RunConfig(verifier="dynamic", head=str(path)).validate()
    RunConfig(verifier="dynamic", head=str(path), mixing="logit").validate()
    assert Grid([1.0], ["linear"], head=str(path)).points()[-1] == {"verifier": "dynamic", "head": str(path),
                                                                    "mixing": "logit"}
    plan = load(ROOT / "config" / "paper.yaml")
    dynamic = [r for j in plan.jobs for r in j.runs if r.verifier == "dynamic"]
    assert dynamic and all(r.changes["mixing"] == "logit" for r in dynamic)


def test_rollouts_read_the_device_once_every_sixteen_tokens(target, draft, monkeypatch):
    """#49: a rollout token cost three host synchronisations (its tokens to the host, the next input back); now the
    batch's tokens stay on the device, and whether every row has ended is read once every ROLLOUT_CHECK tokens."""
    from helpers import host_syncs

    from diversed.decoding.engine import Networks
    from diversed.training.settings import HeadTrainConfig
    from diversed.training.train import ROLLOUT_CHECK, rollouts

    head = WeightHead(target.config.hidden_size, draft.config.hidden_size)
    cfg = HeadTrainConfig(max_new_tokens=48, temperature=1.0, rollout="sample")
    prompts = [[1, 5, 9], [1, 7, 11, 13, 2 + 15]]
    syncs = host_syncs(monkeypatch)
    rolled = rollouts(Networks(target, draft, head), prompts, cfg, eos=set(), seeds=[0, 1])
    decode_syncs = len(syncs)
    assert [len(r.tokens) for r in rolled] == [48, 48]
    assert decode_syncs <= 48 // ROLLOUT_CHECK + 4, syncs  # the checks, the lengths read at the end

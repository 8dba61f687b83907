"""AutoJudge: label mining (a planted important and a planted harmless mismatch, resuming a killed job), the
classifier (a learnable rule recovered, refusal of one class), the `judge` rule (its test against a direct
computation, threshold 0 is strict, threshold 1 accepts every draft, batch invariance) and its command lines."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import tiny_llama

from diversed.decoding.engine import Ends, Networks, generate
from diversed.decoding.head import Judge, WeightHead, load_head
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.verifiers import Criterion, verify_rows
from diversed.tasks import Example
from diversed.tasks.common import ACCURACY
from diversed.training.judge import Miner, fit_logistic, load_shards, mine_group, mine_judge, train_judge
from diversed.training.settings import JudgeConfig, JudgeFit

H = 32  # the peaked pair's hidden size


@pytest.fixture(scope="module")
def tiny_pair():
    """Two unrelated peaked tiny models over a character tokenizer: their greedy choices often differ."""
    from diversed.decoding.models import Pair, char_tokenizer

    tok = char_tokenizer()
    return Pair(tiny_llama(0, vocab=len(tok), hidden=H), tiny_llama(1, vocab=len(tok), hidden=H), tok)


class ReadsOneCharacter:
    """A task whose verdict reads one character of the answer: right when it is the reference's."""

    metric = ACCURACY

    def __init__(self, at: int):
        self.at = at

    def quality(self, completions, examples, scoring="standard") -> float:
        text, ex = completions[0], examples[0]
        return float(text[self.at:self.at + 1] == ex.reference[self.at:self.at + 1])


def greedy_and_draft_choice(pair, ids: list[int], n: int) -> tuple[list[int], list[int]]:
    """The target's greedy answer (one token at a time, no cache) and the draft's greedy choice after each of its
    prefixes, computed directly from the models' forwards."""
    y = []
    for _ in range(n):
        y.append(int(pair.target(torch.tensor([ids + y])).logits[0, -1].argmax()))  # no cache
    d = pair.draft(torch.tensor([ids + y[:-1]])).logits[0, len(ids) - 1:].argmax(-1).tolist()
    return y, d


def test_mining_labels_a_planted_important_mismatch_and_a_planted_harmless_one(tiny_pair):
    tok = tiny_pair.tokenizer
    n = 12
    for prompt in ("abc", "hello", "xyz12", "The cat", "Q: 7+5?"):  # a prompt whose answer has two mismatches
        ids = tok.encode(prompt, add_special_tokens=False)
        y, d = greedy_and_draft_choice(tiny_pair, ids, n)
        at = [t for t in range(n) if d[t] != y[t] and y[t] >= 4 and d[t] >= 4]  # printable characters both
        if len(at) >= 2:
            break
    else:
        pytest.skip("no prompt with two mismatches")
    first, later = at[0], at[-1]
    reference = tok.decode(y, skip_special_tokens=True)
    cfg = JudgeConfig(task="arith", max_new_tokens=n, batch_size=4)
    miner = Miner(cfg, tiny_pair, ReadsOneCharacter(first), Ends(eos=set()), Execution())
    tensors, mismatches, prompts = mine_group(miner, [Example("p0", prompt, reference)], [ids])
    labels = {m.position: m.important for m in mismatches}
    assert sorted(labels) == [t for t in range(n) if d[t] != y[t]]  # every mismatch, found as the models say
    assert labels[first] is True  # the scorer reads the swapped character: the verdict flips
    assert labels[later] is False  # swapped after what the scorer reads: nothing it reads changes
    assert prompts == [{"prompt": "p0", "tokens": n, "mismatches": len(labels), "score": 1.0}]
    assert tensors["features"].shape == (len(labels), 2 * H) and tensors["important"].tolist() == [
        float(m.important) for m in mismatches]
    # the features are the head's inputs: [h_draft; h_target] at the position that predicts the token
    at = len(ids) - 1 + mismatches[0].position
    h = [m.model(torch.tensor([ids + y[:-1]])).last_hidden_state[0, at] for m in (tiny_pair.draft, tiny_pair.target)]
    assert torch.allclose(tensors["features"][0], torch.cat(h).float(), atol=1e-4)


def test_a_killed_mining_job_resumes_without_redoing_finished_prompts(tiny_pair, tmp_path, monkeypatch):
    import diversed.training.judge as judge_module

    cfg = JudgeConfig(task="arith", n_train=6, max_new_tokens=6, batch_size=2)
    full = mine_judge(cfg, tmp_path / "full", pair=tiny_pair, progress=False)

    class Killed(Exception):
        pass

    def kill_after_first(start):
        raise Killed

    with pytest.raises(Killed):
        mine_judge(cfg, tmp_path / "killed", pair=tiny_pair, progress=False, on_group=kill_after_first)
    assert not (tmp_path / "killed" / "manifest.json").exists()
    mined_groups = []
    real = judge_module.mine_group
    monkeypatch.setattr(judge_module, "mine_group", lambda miner, group, encoded: (
        mined_groups.append([ex.id for ex in group]), real(miner, group, encoded))[1])
    resumed = mine_judge(cfg, tmp_path / "killed", pair=tiny_pair, progress=False)
    assert len(mined_groups) == 2  # groups 2 and 3 of 3: the first was kept
    a, b = load_shards(full.parent), load_shards(resumed.parent)
    assert a.records == b.records and torch.equal(a.features, b.features) and torch.equal(a.prompt, b.prompt)
    assert json.loads(resumed.read_text())["prompts"] == 6
    with pytest.raises(ValueError, match="another config"):
        mine_judge(JudgeConfig(task="arith", n_train=5, max_new_tokens=6, batch_size=2), tmp_path / "killed",
                   pair=tiny_pair, progress=False)


def test_the_classifier_recovers_a_learnable_rule_and_refuses_one_class():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g) * torch.tensor([1.0, 10.0, 0.1, 1.0, 1.0, 1.0]) + 3.0
    y = ((x[:, 1] - 3) / 10 + (x[:, 2] - 3) / 0.1 > 0.5).float()  # a rule on standardised features
    mean, std, coef, bias = fit_logistic(x, y, JudgeFit(l2=1e-4))
    pred = ((x - mean) / std).double() @ coef + bias > 0
    assert (pred.float() == y).float().mean() > 0.97
    assert coef[1] > 0 and coef[2] > 0 and coef[[0, 3, 4, 5]].abs().max() < 0.3 * coef[1:3].min()


def planted_labels(folder, pair, n_prompts: int = 20, per_prompt: int = 20, hidden: int = H, task: str = "arith",
                   seed: int = 1, feature: int = 5):
    """A labels folder as mine_judge writes it for the task on the pair, whose importance follows one feature:
    (folder, features, labels)."""
    import dataclasses

    from diversed.decoding.models import fingerprint
    from diversed.training.judge import SHARDS, save_shard
    from diversed.utils import write_json

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_prompts * per_prompt, 2 * hidden, generator=g)
    y = (x[:, feature] + 0.3 * torch.randn(len(x), generator=g) > 0.8).float()
    prompt = torch.arange(n_prompts).repeat_interleave(per_prompt)
    (folder / SHARDS).mkdir(parents=True)
    save_shard(folder / SHARDS / "000000.safetensors", {"features": x, "important": y, "prompt": prompt}, [], [],
               0, 0.0)
    write_json(folder / "manifest.json", {
        "config": dataclasses.asdict(JudgeConfig(task=task)), "config_id": "planted",
        "pair": {"target": fingerprint(pair.target), "draft": fingerprint(pair.draft)},
        "hidden": {"target": hidden, "draft": hidden}})
    return folder, x, y


def test_train_judge_learns_from_mined_labels_and_binds_the_pair(tiny_pair, tmp_path):
    labels, x, y = planted_labels(tmp_path / "labels", tiny_pair)
    path = train_judge(labels, tmp_path / "judge", JudgeFit(holdout=0.3))
    manifest = json.loads((tmp_path / "judge" / "manifest.json").read_text())
    assert manifest["mismatches"] == 400 and manifest["important"] == int(y.sum()) > 0
    assert manifest["held_out"]["prompts"] == 6 and manifest["train"]["prompts"] == 14
    assert manifest["held_out"]["auc"] > 0.85  # the one informative feature, found on prompts it did not see
    judge = load_head(path, tiny_pair.target, tiny_pair.draft, Judge)  # bound to the pair it was mined on
    with pytest.raises(ValueError, match="it is a AutoJudge classifier"):
        load_head(path, tiny_pair.target, tiny_pair.draft)
    assert torch.allclose(judge(x[:, H:], x[:, :H]), judge.logits(x).sigmoid())


def test_train_judge_takes_its_auc_out_of_domain_on_other_tasks_labels(tiny_pair, tmp_path):
    """#50: the judge's AUC on another task's labels (every prompt: it saw none). Labels whose importance follows
    the same feature are separated as on its own task; labels that follow another feature are chance."""
    labels, _, _ = planted_labels(tmp_path / "arith", tiny_pair)
    same, _, y = planted_labels(tmp_path / "same", tiny_pair, task="gsm8k", seed=2)
    other, _, _ = planted_labels(tmp_path / "other", tiny_pair, task="mbpp", seed=3, feature=7)
    train_judge(labels, tmp_path / "judge", JudgeFit(holdout=0.3), [same, other])
    manifest = json.loads((tmp_path / "judge" / "manifest.json").read_text())
    gsm8k, mbpp = manifest["out_of_domain"]
    assert (gsm8k["task"], gsm8k["prompts"], gsm8k["mismatches"], gsm8k["important"]) == ("gsm8k", 20, 400,
                                                                                          int(y.sum()))
    assert gsm8k["auc"] > 0.85 and mbpp["task"] == "mbpp" and abs(mbpp["auc"] - 0.5) < 0.1
    assert train_judge(labels, tmp_path / "alone").parent.joinpath("manifest.json").read_text().count(
        '"out_of_domain": []') == 1


def test_train_judge_refuses_other_labels_of_another_pair_or_unfinished_before_any_fit(tiny_pair, tmp_path):
    from diversed.utils import read_json, write_json

    labels, _, _ = planted_labels(tmp_path / "arith", tiny_pair)
    swapped, _, _ = planted_labels(tmp_path / "swapped", tiny_pair, task="gsm8k")
    m = read_json(swapped / "manifest.json")
    write_json(swapped / "manifest.json", m | {"pair": {"target": m["pair"]["draft"], "draft": m["pair"]["target"]}})
    with pytest.raises(ValueError, match="mined on another pair"):
        train_judge(labels, tmp_path / "judge", eval_labels=[swapped])
    assert not (tmp_path / "judge").exists()
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="unfinished.*no manifest.json|no manifest.json"):
        train_judge(labels, tmp_path / "judge2", eval_labels=[tmp_path / "unfinished"])
    assert not (tmp_path / "judge2").exists()


def test_labels_of_one_class_give_a_constant_judge_at_the_smoothed_rate(tiny_pair, tmp_path):
    # a random tiny target never answers arith right: no swap changes a verdict, every mismatch is harmless
    cfg = JudgeConfig(task="arith", n_train=4, max_new_tokens=6, batch_size=4)
    labels = mine_judge(cfg, tmp_path / "labels", pair=tiny_pair, progress=False).parent
    mined = load_shards(labels)
    assert len(mined.records) > 0 and mined.important.sum() == 0
    path = train_judge(labels, tmp_path / "judge", JudgeFit(holdout=0.0))
    manifest = json.loads((tmp_path / "judge" / "manifest.json").read_text())
    assert "one class" in manifest["constant"] and manifest["train"]["auc"] is None
    judge = load_head(path, tiny_pair.target, tiny_pair.draft, Judge)
    n = len(mined.records)
    assert torch.allclose(judge(mined.features[:, H:], mined.features[:, :H]),
                          torch.full((n,), 1 / (n + 2)))  # (0 + 1) / (n + 2)


class FixedUniforms:
    """A step's random numbers fixed by the test: the test's uniforms r [R, K], corrections by argmax."""

    def __init__(self, r: torch.Tensor):
        self.r, self.count = r, torch.zeros(r.shape[0], dtype=torch.long)

    def uniform(self, lane: int, width: int = 1) -> torch.Tensor:
        return self.r

    def categorical(self, probs: torch.Tensor, lane: int) -> torch.Tensor:
        return probs.argmax(-1)


def importance_rows(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, importance: torch.Tensor,
                    threshold: float, r: torch.Tensor | None):
    """verify_rows with the judge's importances as w and fixed uniforms r [R, K] (None: greedy)."""
    R, K = drafts.shape
    return verify_rows(drafts, q, p, importance, [K] * R, draws=None if r is None else FixedUniforms(r),
                       criterion=Criterion("judge", greedy=r is None, knob=threshold))


def test_judge_test_keeps_a_mismatch_where_the_judge_calls_it_unimportant():
    p = torch.tensor([[[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2]]])  # [1, K + 1, V]
    q = torch.tensor([[[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]])  # [1, K, V]
    drafts = torch.tensor([[1, 2, 2]])  # none is p's argmax
    importance = torch.tensor([[0.1, 0.4, 0.9]])
    n, nxt, bias, _ = importance_rows(p, q, drafts, importance, 0.5, None)
    assert n.tolist() == [2] and nxt.tolist() == [0]  # kept twice, the important third replaced by argmax p
    n0, *_ = importance_rows(p, q, drafts, importance, 0.0, None)
    assert n0.tolist() == [0]  # threshold 0: strict greedy
    # sampled: strict's test first (u q(x) < p(x)); a rejected draft kept where unimportant
    r = torch.tensor([[0.99, 0.99, 0.01]], dtype=torch.float64)  # strict rejects 1 and 2, accepts 3
    n, _, bias, kl = importance_rows(p, q, drafts, torch.tensor([[0.1, 0.9, 0.1]]), 0.5, r)
    assert n.tolist() == [1]  # the first kept by the judge, the second rejected by both
    tv, divergence = 0.5 * (p[0, 0] - q[0, 0]).abs().sum(), (q[0, 0] * (q[0, 0] / p[0, 0]).log()).sum()
    assert torch.allclose(bias[0, :2], torch.tensor([tv, 0.0]))  # emitted q where kept, p where strict's test ran
    assert torch.allclose(kl[0, :2], torch.tensor([divergence, 0.0]))  # KL(emitted || p), in nats


def decode(pair, judge, verifier, knob, *, temperature, batch_size=1, n=3, tokens=True):
    from diversed.decoding.models import encode_prompt

    prompts = [encode_prompt(pair.tokenizer, t) for t in ("1+2=", "what is", "zz top", "12*3")[:n]]
    dec = Decoding(verifier, K=3, max_new_tokens=10, sampling=Sampling(temperature), knob=knob,
                   eos_token_id=())
    gens = generate(Networks.of(pair, judge), prompts, dec, batch_size=batch_size)
    return [g.tokens for g in gens] if tokens else gens


@pytest.fixture(scope="module")
def random_judge(tiny_pair):
    judge = Judge(H, H).bind(tiny_pair.target, tiny_pair.draft)
    torch.manual_seed(3)
    with torch.no_grad():
        judge.proj.weight.normal_(0, 0.1)  # P(important) spread over (0, 1), never rounded to 1
    return judge


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_judge_at_threshold_0_is_strict_and_at_1_accepts_every_draft(tiny_pair, random_judge, temperature):
    assert decode(tiny_pair, random_judge, "judge", 0.0, temperature=temperature) == decode(
        tiny_pair, None, "strict", None, temperature=temperature)
    for g in decode(tiny_pair, random_judge, "judge", 1.0, temperature=temperature, tokens=False):
        assert g.accepted == g.drafted  # every P(important) < 1


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_judge_is_batch_invariant(tiny_pair, random_judge, temperature):
    one = decode(tiny_pair, random_judge, "judge", 0.5, temperature=temperature, n=4)
    assert decode(tiny_pair, random_judge, "judge", 0.5, temperature=temperature, batch_size=3, n=4) == one
    assert one != decode(tiny_pair, random_judge, "judge", 0.0, temperature=temperature, n=4)  # it does relax


def test_judge_verifier_needs_a_judge(tiny_pair, random_judge, tmp_path):
    with pytest.raises(ValueError, match="needs --judge"):
        decode(tiny_pair, None, "judge", 0.5, temperature=0.0)
    head = WeightHead(H, H).bind(tiny_pair.target, tiny_pair.draft)
    with pytest.raises(ValueError, match="needs --judge"):
        decode(tiny_pair, head, "judge", 0.5, temperature=0.0)
    with pytest.raises(ValueError, match="needs --head"):
        decode(tiny_pair, random_judge, "dynamic", None, temperature=0.0)


def test_the_command_lines_mine_train_and_decode(tiny_dir, tmp_path, capsys):
    from diversed.cli import main
    from diversed.decoding.models import load_pair

    pair = ["--target", str(tiny_dir / "tiny-target"), "--draft", str(tiny_dir / "tiny-draft-l1")]
    main(["mine-judge", "--task", "arith", *pair, "--n-train", "3", "--max-new-tokens", "6", "--batch-size", "2",
          "--out", str(tmp_path / "mined")])
    assert "judge labels:" in capsys.readouterr().out and len(load_shards(tmp_path / "mined").prompts) == 3
    labels, _, _ = planted_labels(tmp_path / "labels", load_pair(pair[1], pair[3]), hidden=64)
    other, _, _ = planted_labels(tmp_path / "other", load_pair(pair[1], pair[3]), hidden=64, task="gsm8k", seed=2)
    main(["train-judge", "--labels", str(labels), "--eval-labels", str(other), "--out", str(tmp_path / "judge")])
    assert re.search(r"held-out AUC \d\.\d{3} on \d+ prompts\); on gsm8k: AUC \d\.\d{3} on 20 prompts",
                     capsys.readouterr().out)
    main(["generate", *pair, "--verifier", "judge", "--judge", str(tmp_path / "judge" / "judge.safetensors"),
          "--knob", "0.5", "--task", "arith", "-n", "2", "--max-new-tokens", "6", "--out", str(tmp_path / "runs")])
    with pytest.raises(SystemExit):
        main(["generate", *pair, "--verifier", "judge", "--knob", "0.5", "--task", "arith", "-n", "2",
              "--out", str(tmp_path / "runs")])
    assert "needs --judge" in capsys.readouterr().err

"""What the tests share: tiny random models built in the test process (no downloads, a few layers, a small
vocabulary) and of the paper pairs' classes, a cache-free reference decoder, Snakemake in a subprocess on a copy of
the workflow, simulated claim data, and a counter of host synchronisations. Fixtures live in conftest.py."""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from diversed.decoding.engine import Networks, generate
from diversed.decoding.rng import DRAFT, Draws, key, stream_seed
from diversed.decoding.settings import Decoding, Sampling
from diversed.decoding.verifiers import (
    Criterion,
    Logits,
    _as_weight,
    logits_to_probs,
    synthetic_rows,
    total_variation,
    verify_rows,
)

ROOT = Path(__file__).resolve().parent.parent


class Stream:
    """One row's stream on the host side (single-row references): next() is the next step's Draws [1]."""

    def __init__(self, seed: int, device: torch.device | str = "cpu"):
        self.keys, self.steps = torch.tensor([key(seed)], device=device), 0

    def next(self) -> Draws:
        self.steps += 1
        return Draws(self.keys, torch.tensor([self.steps - 1], device=self.keys.device))

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_llama(seed: int = 0, *, vocab: int = 96, hidden: int = 32, layers: int = 2, ctx: int = 512,
               dtype: torch.dtype = torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(dtype)
    # larger logits than the default init, so that distributions are peaked like a trained model's
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None  # tests decode to full length unless they ask for an EOS
    return model.eval().requires_grad_(False)


def negated(model):
    """A draft whose greedy token is the target's argmin: every greedy draft is rejected."""
    d = copy.deepcopy(model)
    with torch.no_grad():
        d.lm_head.weight.neg_()
    return d


def tiny(model_type: str, seed: int = 0):
    """A tiny random model of a transformers model type (llama, qwen3, ...), float32, peaked logits."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).float().eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = None
    return model


def reference_speculative(target, draft, ids, *, K, n_new, w, temperature, seed, mixing="linear"):
    """Cache-free reference: every step re-encodes the whole sequence through both models; step s draws from
    count s of the stream of `seed`, at the engine's lanes."""
    stream = Stream(seed)
    tokens = list(ids)
    new: list[int] = []
    while len(new) < n_new:
        k = min(K, n_new - len(new) - 1)
        drafts, q_rows, draws = [], [], stream.next()
        for j in range(k):
            logits = draft(torch.tensor([tokens + drafts])).logits[0, -1].float()
            q_i = logits_to_probs(logits, temperature)
            drafts.append(int(draws.categorical(q_i[None], DRAFT + j)))
            q_rows.append(q_i)
        logits = target(torch.tensor([tokens + drafts])).logits[0, -(k + 1):].float()
        p = logits_to_probs(logits, temperature)
        q = torch.stack(q_rows) if q_rows else p.new_zeros(0, p.shape[-1])
        v = verify(torch.tensor(drafts, dtype=torch.long), q, p, w, mixing=mixing, draws=draws)
        emitted = drafts[: v.n_accepted] + [v.next_token]
        tokens += emitted
        new += emitted
    return new


# ------------------------------------------------------------------------------------------- workflow


def rewrite_generations(run_dir: Path, rows: list[dict]) -> None:
    """Replace a run's rows and record their hash in its manifest and scores, as if the engine had written them
    (tests of what reads the records; a damaged run, whose hash no longer matches, is refused instead)."""
    import json

    (run_dir / "generations.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    seal_run(run_dir)


def seal_run(run_dir: Path) -> Path:
    """Make a hand-written run folder whole as the engine writes one: its manifest records the rows' count and
    hash and the run id of its config and prompts; its scores.json (if any) names that run id and hash."""
    import hashlib
    import json

    from diversed.runs.run import prompt_hash
    from diversed.utils import config_hash

    text = (run_dir / "generations.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest |= {"prompts": len(rows), "generations_sha256": hashlib.sha256(text.encode()).hexdigest(),
                 "run_id": config_hash(manifest["config"] | {"prompts": [prompt_hash(r["prompt"]) for r in rows]})}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    scores = run_dir / "scores.json"
    if scores.is_file():
        fixed = json.loads(scores.read_text()) | {k: manifest[k] for k in ("run_id", "generations_sha256")}
        scores.write_text(json.dumps(fixed))
    return run_dir


def snakemake(*args, cwd=ROOT, check=True, timeout=900, wandb="disabled") -> subprocess.CompletedProcess:
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                        "WANDB_MODE": wandb, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def jobs(dry_run_output: str) -> dict[str, int]:
    """Job counts per rule from a dry run's 'Job stats' table."""
    table = dry_run_output.split("Job stats:")[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M)
            if m.group(1) != "total"}


def tracked_files() -> list[str]:
    """The repository's tracked files (a clean clone's tree)."""
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in done.stdout.splitlines() if (ROOT / f).is_file()]


def workflow_copy(tmp: Path, whole: bool = False) -> Path:
    """The workflow's files copied to tmp (whole: every tracked file of the repository, as a clone has them)."""
    if whole:
        for name in tracked_files():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp / name)
        return tmp
    for name in ("Snakefile", "workflow", "config", "profiles", "environment.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp / name)
    return tmp


# ------------------------------------------------------------------------------------------- killed processes

ENV = os.environ | {"WANDB_MODE": "disabled", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _sigint_handler_address() -> bytes:
    """The OS's SIGINT handler of this process (sigaction's sa_handler, the first field on Linux)."""
    import ctypes

    buf = ctypes.create_string_buffer(256)  # struct sigaction fits
    ctypes.CDLL(None).sigaction(signal.SIGINT, None, buf)
    return buf.raw[:ctypes.sizeof(ctypes.c_void_p)]


def sigint_as_a_terminal_has_it() -> str:
    """Give this process SIGINT as a terminal's foreground job has it (Python's handler, installed at the OS, and
    the signal unblocked), as its children inherit it; returns what was different, "" when nothing was. Under the
    whole suite one xdist worker once let neither an in-process SIGINT nor its child's reach Python's handler."""
    found = []
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        found.append(f"Python's SIGINT handler was {signal.getsignal(signal.SIGINT)!r}")
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        found.append("SIGINT was blocked")
    before = _sigint_handler_address()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if _sigint_handler_address() != before:
        found.append(f"the OS's SIGINT handler was another ({before.hex()})")
    return "; ".join(found)


def start(args: list[str], cwd: Path | None = None, stderr=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)


def kill_when(proc: subprocess.Popen, ready, deadline: float = 120.0) -> None:
    """SIGKILL the whole process group once ready() holds (the process must still be running)."""
    t0 = time.time()
    while not ready():
        assert proc.poll() is None, "finished before it could be killed"
        assert time.time() - t0 < deadline, "never reached the kill point"
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def count_files(root: Path, name: str) -> int:
    """Files called name under root, read while a live process renames and removes its temporary folders
    (os.walk skips a folder that vanishes between listing and reading; Path.rglob raises)."""
    return sum(name in files for _, _, files in os.walk(root))


# ------------------------------------------------------------------------------------------- paper classes

PAPER_KINDS = ("llama3", "qwen3", "gemma3")


def tiny_paper_model(kind: str, seed: int = 0, *, hidden: int = 64, layers: int = 3, ctx: int = 512,
                     vision_layers: int = 2):
    """A tiny random model of a paper pair's class, float32, vocabulary 128 (covers the char tokenizer):
    llama3: LlamaForCausalLM with llama3 RoPE scaling (Llama 3.1 / 3.2); qwen3: Qwen3ForCausalLM;
    gemma3: Gemma3ForConditionalGeneration (the class google/gemma-3-*-it load as): a Siglip vision tower and
    a text model whose sliding window (8) alternates with full attention (5:1 in Gemma 3, 1:1 here)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
        SiglipVisionConfig,
    )

    common = dict(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=ctx,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        model_cls, cfg = LlamaForCausalLM, LlamaConfig(**common, rope_parameters=rope, tie_word_embeddings=False)
    elif kind == "qwen3":
        model_cls, cfg = Qwen3ForCausalLM, Qwen3Config(**common, tie_word_embeddings=False)
    elif kind == "gemma3":
        text = Gemma3TextConfig(**common, sliding_window=8, query_pre_attn_scalar=16,
                                layer_types=["sliding_attention", "full_attention"] * (layers // 2)
                                + ["sliding_attention"] * (layers % 2))
        vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=vision_layers,
                                    num_attention_heads=2, image_size=16, patch_size=8)
        # the image tokens at the top of the vocabulary, as in Gemma 3 (262144 of 262208)
        model_cls, cfg = Gemma3ForConditionalGeneration, Gemma3Config(
            text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=125,
            eoi_token_index=126, image_token_index=127)
    else:
        raise ValueError(f"unknown paper model kind {kind!r}; allowed: {', '.join(PAPER_KINDS)}")
    torch.manual_seed(seed)
    model = model_cls(cfg).float()
    model.generation_config.eos_token_id = None  # tests decode to full length unless they ask for an EOS
    return model.eval().requires_grad_(False)


def thinking_tokenizer():
    """The character tokenizer with a Qwen3-style chat template: the reply opens with an empty think block only
    when the caller passes enable_thinking=False, else the model thinks first."""
    from diversed.decoding.models import char_tokenizer

    tok = char_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>"
                         "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
                         "{% endif %}{% endif %}")
    return tok


def claim_units(levels: dict, prompts: int = 12, seeds: int = 2, *, rng=None, tasks=("arith",), noise: float = 0.05,
          difficulty: bool = True, T: float = 1.0, head_task: str = "") -> pd.DataFrame:
    """A prompt table of one pair at T, K = 5: levels[method] = (acceptance, accuracy, tokens/s) around which each
    prompt's values vary; prompts differ in difficulty, every seed decodes every prompt."""
    rng = rng or np.random.default_rng(0)
    n = prompts * seeds  # rows per (task, method), seed-major
    blocks = [(task, method, level) for task in tasks for method, level in levels.items()]
    rows = n * len(blocks)
    seed = np.tile(np.repeat(np.arange(seeds), prompts), len(blocks))
    prompt = np.tile(np.arange(prompts), seeds * len(blocks))
    ease = {task: rng.uniform(-0.3, 0.3, prompts) if difficulty else np.zeros(prompts) for task in tasks}
    alpha, accuracy, speed = (np.repeat([level[i] for *_, level in blocks], n) for i in range(3))
    accuracy = accuracy + np.concatenate([ease[task][prompt[:n]] for task, *_ in blocks])
    task = np.repeat([b[0] for b in blocks], n)
    method = np.repeat([b[1] for b in blocks], n)
    tokens = np.full(rows, 40)
    return pd.DataFrame({
        "run_id": pd.Series(task, dtype=object) + "-" + method + "-" + seed.astype(str),
        "pair": "p", "task": task, "method": method, "head_task": head_task, "lambda": math.nan, "temperature": T,
        "K": np.where(np.isin(method, ["autoregressive", "draft"]), np.nan, 5.0),
        "weight": pd.Series(method).map({"strict": 1.0, "fixed": 0.5}).to_numpy(), "mixing": "linear",
        "metric": "accuracy", "seed": seed, "prompt": prompt,
        "accepted": np.round(np.clip(alpha + rng.uniform(-noise, noise, rows), 0, 1) * 40), "drafted": 40.0,
        "new_tokens": tokens, "seconds": tokens / (speed * rng.uniform(0.9, 1.1, rows)),
        "quality": (rng.random(rows) < np.clip(accuracy, 0, 1)).astype(float),
    })


def host_syncs(monkeypatch) -> list[str]:
    """Every tensor-to-host read from now on (tolist, item, bool/int/float/index), appended by name to the list."""
    syncs: list[str] = []
    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **k):
            syncs.append(_name)
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return syncs


def host_copies(monkeypatch) -> list[str]:
    """Every tensor made from host data from now on (torch.tensor, torch.as_tensor), appended as the module that
    made it: diversed.decoding.transfer for the decode loop's copies (non-blocking from pinned memory on CUDA)."""
    import sys

    copies: list[str] = []
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def counted(*a, _original=original, **k):
            copies.append(sys._getframe(1).f_globals.get("__name__", "?"))
            return _original(*a, **k)

        monkeypatch.setattr(torch, name, counted)
    return copies


# ------------------------------------------------------------------------------------------- one-row verification
# The engine verifies every row of a batch at once (verifiers.verify_rows); the tests also check the math on one
# block, with its weight range checked and its outcome on the host.


@dataclass
class Verdict:
    """Outcome of verifying one draft block."""

    n_accepted: int  # number of leading draft tokens accepted, 0..K
    next_token: int  # correction token (n < K) or bonus token (n == K)
    bias_tv: torch.Tensor  # [n + 1] TV(nu, p) at each emitted position (0 for the bonus token)

    def emitted(self, draft_tokens: torch.Tensor) -> list[int]:
        """The tokens this step appends: the accepted draft prefix, then next_token."""
        return draft_tokens[: self.n_accepted].tolist() + [self.next_token]




def verify(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, w: float | torch.Tensor, **kw) -> Verdict:
    """Verify K draft tokens against nu = ensemble(p, q, w) (test "ensemble"; the other tests: verify_rows).

    draft_tokens [K] long, q [K, V] draft probs, p [K + 1, V] target probs, w float or [K].
    Sampling: accept x_i with prob min(1, nu_i(x_i) / q_i(x_i)) up to the first rejection n, then
    sample from norm(max(0, nu_n - q_n)); if all K pass, the bonus token comes from p_{K+1}.
    Greedy: accept while x_i == argmax nu_i; correction argmax nu_n; bonus argmax p_{K+1}.
    w = 1 is exactly standard speculative sampling (Leviathan et al. 2023, Algorithm 1).
    log_p [K + 1, V] / log_q [K, V]: optional log-probabilities, used by logit mixing (no underflow).
    kw: verify_on_device's (mixing, greedy, draws or stream, log_p, log_q, test, knob).
    """
    _as_weight(w, q.shape[:1], q.device)  # the range check; verify_on_device trusts its caller
    n, next_token, bias = verify_on_device(draft_tokens, q, p, w, **kw)
    n, next_token = torch.stack([n, next_token]).tolist()  # the one host sync
    return Verdict(n_accepted=n, next_token=next_token, bias_tv=bias[: n + 1])


def verify_on_device(
    draft_tokens: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    w: float | torch.Tensor,
    *,
    mixing: str = "linear",
    greedy: bool = False,
    draws: Draws | None = None,
    stream: Stream | None = None,
    log_p: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
    test: str = "ensemble",
    knob: float | None = None,
    knob2: float | None = None,
    deferral: str = "chow",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """verify() without a host sync: (n_accepted [] long, next_token [] long, bias_tv [K + 1]) on the device.

    bias_tv[i] = TV(nu_i, p_i) for i < K and 0 for the bonus position; the emitted tokens' biases are
    bias_tv[:n + 1]. One row of verify_rows; w is trusted to lie in [0, 1] (verify checks it). Its random numbers:
    draws (one row), else the next step of stream, else the first step of seed 0's stream.
    """
    K, V = q.shape
    if draft_tokens.shape != (K,) or p.shape != (K + 1, V):
        raise ValueError(
            f"shapes disagree: draft_tokens {tuple(draft_tokens.shape)}, q {tuple(q.shape)}, p {tuple(p.shape)}; "
            "expected [K], [K, V], [K + 1, V]"
        )
    w = torch.as_tensor(w, dtype=torch.float32, device=q.device).expand(K)
    logs = Logits(*(None if x is None else x[None] for x in (log_p, log_q)))
    draws = draws if draws is not None else (stream or Stream(0)).next()
    n, next_token, bias, _ = verify_rows(draft_tokens[None], q[None], p[None], w[None], [K], draws=draws,
                                         criterion=Criterion(test, mixing, greedy, knob, knob2=knob2,
                                                             deferral=deferral), logs=logs)
    return n[0], next_token[0], bias[0]




def synthetic_verify(K: int, p: torch.Tensor, acceptance: float, *, greedy: bool = False,
                     stream: Stream | None = None) -> Verdict:
    """Accept each of K drafts with probability `acceptance`, independently, up to the first rejection
    (as vLLM's synthetic rejection sampler), then emit a target token at the stopping position.

    For timing the engine at real model sizes with random weights, where real acceptance is
    meaningless: the forwards, the rollback and the token counts are those of a real run at alpha.
    """
    n, next_token, bias = synthetic_on_device(K, p, acceptance, greedy=greedy, stream=stream)
    n, next_token = torch.stack([n, next_token]).tolist()
    return Verdict(n_accepted=n, next_token=next_token, bias_tv=bias[: n + 1])


def synthetic_on_device(K: int, p: torch.Tensor, acceptance: float, *, greedy: bool = False,
                        stream: Stream | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """synthetic_verify without a host sync, shaped as verify_on_device's result (one row of synthetic_rows)."""
    n, next_token, bias, _ = synthetic_rows([K], p[None], acceptance, greedy=greedy,
                                            draws=(stream or Stream(0)).next())
    return n[0], next_token[0], bias[0]


def row_draws(seed: int, rows: int) -> Draws:
    """The first step's numbers of `rows` streams (seed, 0 .. rows - 1)."""
    return Draws(torch.tensor([key(stream_seed(seed, i)) for i in range(rows)]), torch.zeros(rows, dtype=torch.long))


def verify_many(q: torch.Tensor, p: torch.Tensor, w, draws: int, seed: int, **kw):
    """`draws` independent verifications of one block in one verify_rows call: drafts x ~ q drawn per row, row i
    drawing its uniforms and its correction from stream (seed, i) (i.i.d. draws). q [K, V], p [K + 1, V], w a float
    or [K] -> (drafts [draws, K], n_accepted [draws], next_token [draws])."""
    K, V = q.shape
    drafts = torch.multinomial(q, draws, replacement=True, generator=torch.Generator().manual_seed(seed)).T
    w = torch.as_tensor(w, dtype=torch.float32).expand(K)
    n, next_token, *_ = verify_rows(drafts, q.expand(draws, K, V), p.expand(draws, K + 1, V), w.expand(draws, K),
                                    [K] * draws, draws=row_draws(seed, draws), criterion=Criterion(**kw))
    return drafts, n, next_token


# ------------------------------------------------------------------------------------------ distributions
# the verifier tests' random distributions, draws and goodness-of-fit checks

V = 8
DRAWS = 20_000


def random_dists(seed: int, rows: int, sharp: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (sharp * torch.randn(rows, V, generator=g)).softmax(-1)


def chi_square_ok(counts: torch.Tensor, expected: torch.Tensor) -> bool:
    """Chi-square goodness of fit at a 1e-4 significance level (tiny expected cells pooled)."""
    n = counts.sum()
    e = expected * n
    keep = e >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum(-1, keepdim=True)])
    exp = torch.cat([e[keep], e[~keep].sum(-1, keepdim=True)])
    mask = exp > 0
    stat = float((((obs - exp) ** 2) / exp.clamp_min(1e-12))[mask].sum())
    dof = int(mask.sum()) - 1
    # Wilson-Hilferty approximation of the chi-square quantile at 1 - 1e-4 (z = 3.719)
    crit = dof * (1 - 2 / (9 * dof) + 3.719 * math.sqrt(2 / (9 * dof))) ** 3
    return stat < crit


PROMPTS = [[1, 5, 7, 9], [1, 30, 31], [1, 80, 3, 3, 3, 40, 12]]


def related(p: torch.Tensor, seed: int, noise: float = 1.0) -> torch.Tensor:
    """A draft distribution near p (a draft model's is): softmax(log p + noise)."""
    g = torch.Generator().manual_seed(seed)
    return (p.log() + noise * torch.randn(p.shape, generator=g)).softmax(-1)


def first_position(q, p, test, knob, seed=0, draws=DRAWS):
    """Over draws of one draft x ~ q: (histogram of the token emitted at position 0, acceptance count)."""
    x, n, next_token = verify_many(q, p, 1.0, draws, seed, test=test, knob=knob)
    return torch.bincount(torch.where(n > 0, x[:, 0], next_token), minlength=V).float(), int(n.sum())


def binomial_ok(successes: int, n: int, prob: float) -> bool:
    se = math.sqrt(max(prob * (1 - prob), 1e-6) / n)
    return abs(successes / n - prob) < 4.5 * se + 1e-9


def accepts_as(q, p, a, emitted, seed, **kw):
    """Drafts x ~ q at the first position, through verify_rows: the acceptance sum q a (binomial) and the emitted
    distribution (chi-square), which is not p (the rule is lossy here: the check has power); and the step's bias."""
    x, n, nxt = verify_many(q, p, 1.0, DRAWS, seed, **kw)
    counts = torch.bincount(torch.where(n > 0, x[:, 0], nxt), minlength=V).float()
    expected = float((q[0] * a).sum())
    assert binomial_ok(int(n.sum()), DRAWS, expected), (int(n.sum()) / DRAWS, expected)
    assert chi_square_ok(counts, emitted) and not chi_square_ok(counts, p[0]), (counts / DRAWS, emitted)
    v = verify(torch.tensor([0]), q, p, 1.0, stream=Stream(0), **kw)
    bias = float(total_variation(emitted, p[0]))
    assert math.isclose(float(v.bias_tv[0]), bias, rel_tol=1e-6, abs_tol=1e-5), (float(v.bias_tv[0]), bias)


def decode(target, draft, verifier, temperature, **kw):
    decoding = Decoding(verifier, K=4, max_new_tokens=30, sampling=Sampling(temperature), **kw)
    return generate(Networks(target, draft), PROMPTS, decoding, seeds=[7 + i for i in range(len(PROMPTS))],
                    batch_size=2)


# ------------------------------------------------------------------------------------------ hub rows

def hub_row(task: str, i: int) -> dict:
    """Row i of a task's dataset, in the hub's own row format (field names, nesting and extra fields)."""
    return {
        "gsm8k": {"question": f"Tom has {i} apples. How many apples does he have?", "answer": f"He has {i}.\n#### {i}"},
        "cnndm": {"article": f"(CNN) The council met on day {i} and voted.", "highlights": f"Council voted on day {i}.",
                  "id": f"{i:040x}"},
        "xsum": {"document": f"Rain fell in Wales on day {i}.", "summary": f"Wet day {i} in Wales.",
                 "id": str(29750000 + i)},
        "mbpp": {"task_id": 11 + i, "text": f"Write a function to add {i} to a number.",
                 "code": f"def f(x):\n    return x + {i}", "test_list": [f"assert f(0) == {i}"], "test_setup_code": "",
                 "challenge_test_list": []},
        "wmt16-de-en": {"translation": {"de": f"Das ist Satz {i}.", "en": f"This is sentence {i}."}},
        "humaneval": {"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Add {i}.\"\"\"\n",
                      "canonical_solution": f"    return x + {i}\n", "test": f"def check(c):\n    assert c(0) == {i}\n",
                      "entry_point": f"f{i}"},
    }[task]

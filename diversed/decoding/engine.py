"""The decoding engine: speculative decoding with strict / fixed / dynamic verification, and the target-only and
draft-only baselines, for B sequences advancing in lockstep (B = 1 for timing).

Each model keeps a KV cache of B rows (diversed.decoding.stepper.Stepper), each row at its own length, holding
every token of its sequence but the newest. A speculative step, over the live rows at once: draft_block (the draft
proposes k tokens per row), score_block (one target forward over [newest, d_1..d_k] per row), the rule's weight (w
at each drafted position: settings.RULES, verifiers.WEIGHT_SOURCES), verify_step (verifiers.verify_rows, then the step's
one host transfer for the whole batch), Generation.append per row, roll_back (each row's caches cropped to its own
accepted prefix: accepted tokens are never re-encoded). A row that ends (EOS, its token budget) leaves the batch
and the next prompt takes its slot. What the host sends a step (tokens, positions, lengths) goes through
transfer.to_device: on CUDA pinned and non-blocking, so the step's one read is its only synchronisation (counted on
CPU by tests/decoding/test_fastpath.py; under CUDA's sync debug mode by tests/test_gpu.py, unrun here).

A row's draws do not depend on its batch: each prompt draws from its own counter-based stream (rng: a row's
numbers are a hash of its seed, its step count and the draw's lane, computed for the whole batch at once), and each
row computes with its own positions and mask. Its tokens agree up to the float rounding a batch's shape brings
(bitwise on the tests' tiny models, tests/decoding/test_batch.py; on the embedded pair a draw in p's far tail can take
a neighbouring far-tail token; on CUDA the kernels of a bf16 matmul change with the batch size). Statistics live in
diversed.decoding.stats.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from diversed.decoding import fastpath
from diversed.decoding.head import MODULES
from diversed.decoding.models import context_length, shared_width
from diversed.decoding.models import vocab_size as vocab_width
from diversed.decoding.rng import DRAFT, Draws, Streams
from diversed.decoding.settings import RULES, Decoding, Execution, Sampling, trained_module
from diversed.decoding.stats import Generation, Step
from diversed.decoding.stepper import Stepper
from diversed.decoding.transfer import index, to_device
from diversed.decoding.verifiers import (
    WEIGHT_SOURCES,
    Criterion,
    Logits,
    fly_window,
    logits_to_logprobs,
    synthetic_rows,
    total_variation,
    verify_rows,
)


def logprobs(sampling: Sampling, logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] -> log-probabilities [..., V] after temperature (T = 1 when greedy), top-k and top-p."""
    return logits_to_logprobs(logits, sampling.temperature, sampling.top_p, sampling.top_k)


def draw(sampling: Sampling, scores: torch.Tensor, draws: Draws, lane: int) -> torch.Tensor:
    """scores [R, V] -> one token id per row [R] (long), on the device: the argmax when greedy (scores: any monotone
    map of the log-probabilities), else a sample from exp(scores[r]) (log-probabilities) at each row's own lane."""
    if sampling.greedy:
        return scores.argmax(-1)
    return draws.categorical(scores.exp(), lane)


@dataclass
class Networks:
    """The modules a decode runs: the target p, the draft q (None: the target alone), the trained module its
    verifier reads (settings.TRAINED: DIVERSED's weight head or AutoJudge's classifier), and the pair's common logit
    width where the two differ by padding (models.Pair.vocab_size)."""

    target: nn.Module
    draft: nn.Module | None = None
    trained: nn.Module | None = None
    vocab_size: int | None = None

    @classmethod
    def of(cls, pair, trained: nn.Module | None = None) -> Networks:
        """A loaded pair's (models.Pair) target, draft and logit width, with a trained module."""
        return cls(pair.target, pair.draft, trained, pair.vocab_size)


def check_request(nets: Networks, prompt_len: int, decoding: Decoding, execution: Execution) -> None:
    """Every check that can fail, before any compute: the trained module a verifier needs, then the models
    (prompt_len: the longest prompt's)."""
    target, draft, trained, vocab_size = nets.target, nets.draft, nets.trained, nets.vocab_size
    verifier = decoding.verifier
    needs = trained_module(verifier)
    kind = MODULES.get(needs)
    if kind is not None and not isinstance(trained, kind):
        raise ValueError(f"verifier {verifier!r} needs --{needs}, a trained {kind.WHAT} (trained= in Python)")
    models = [("target", target)]
    if verifier != "autoregressive":
        if draft is None:
            raise ValueError(f"verifier {verifier!r} needs a draft model")
        models.append(("draft", draft))
    if verifier in RULES:
        v_t, v_d = vocab_width(target), vocab_width(draft)
        if v_t != v_d and (vocab_size is None or vocab_size < max(v_t, v_d)):
            raise ValueError(f"vocabulary mismatch: target has {v_t} logits, draft has {v_d} (load the pair with "
                             "diversed.decoding.models.load_pair to pad provably identical tokenizers)")
    if kind is not None:
        trained.check_pair(target, draft)
    for role, model in models:
        fastpath.check_capture(execution.capture, model, role, enabled=execution.fastpath)
        ctx = context_length(model)
        if ctx is not None and prompt_len + decoding.max_new_tokens > ctx:
            raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({decoding.max_new_tokens}) exceeds "
                             f"the {role}'s context length {ctx}")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU): before and after anything timed."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _finite(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, ..., V] -> (logits, ok [R]) without a host sync. NaN anywhere in a row's logits, or a position
    without a finite value, makes its max non-finite (one reduction). Broken rows are zeroed so that sampling can
    go on; the caller raises at its next host sync (_raise_if_broken), and nothing sampled from them is emitted."""
    ok = torch.isfinite(logits.amax(dim=-1)).reshape(logits.shape[0], -1).all(dim=1)  # [R]
    return torch.where(ok.view(-1, *[1] * (logits.dim() - 1)), logits, torch.zeros_like(logits)), ok


def _raise_if_broken(ok: list[float], who: str, step: int) -> None:
    if not all(ok):
        raise FloatingPointError(f"{who} logits are not finite (NaN, +inf, or no finite value) at step {step}; "
                                 "refusing to sample")


def _fidelity(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference-free fidelity of tokens [...] under the target's raw logits [..., V] that predicted them:
    (log p_target(token) at T = 1 [...], is it the target's argmax [...]), on the device."""
    logprob = logits.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
    return logprob, logits.argmax(-1) == tokens


def _to_host(*xs: torch.Tensor) -> list[list[float]]:
    """Small device tensors to Python lists in one transfer: the host sync of a step, for the whole batch.

    Packed as float32, which holds token ids exactly (< 2^24) and the float32 statistics unchanged; each comes
    back flat (row-major)."""
    flat = torch.cat([x.reshape(-1).float() for x in xs]).tolist()
    out, i = [], 0
    for x in xs:
        out.append(flat[i:i + x.numel()])
        i += x.numel()
    return out


class _Clock:
    """Timestamps inside a step without host syncs: CUDA events on a GPU (read after the final sync),
    perf_counter elsewhere."""

    def __init__(self, device: torch.device):
        self.events = device.type == "cuda"

    def __call__(self):
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1000 if self.events else b - a


def _prompt_ids(input_ids) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(f"input_ids holds {input_ids.shape[0]} sequences: pass a list of prompts to "
                                 "engine.generate for a batch")
            input_ids = input_ids[0]
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ValueError("empty prompt: input_ids has no tokens")
    return ids


def eos_set(model: nn.Module, eos_token_id: int | tuple[int, ...] | list[int] | None = None) -> set[int]:
    """The ids that end a sequence: eos_token_id, else the model's generation config's."""
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}


@dataclass
class Row:
    """A sequence in the batch: its prompt's index, its Generation, its newest token (in neither cache), what the draft
    has not seen, its step marks (draft start, verify start, done) and its start."""

    index: int
    out: Generation
    last: int
    pending: list[int]
    started: float  # perf_counter once its prefill had finished on the device: its decode's clock starts there
    marks: list[tuple] = field(default_factory=list)


PREFILL_TOKENS = 16384  # the most padded prompt tokens one prefill forward takes: its activations stay small


def _prefill_groups(prefill: list[tuple[int, list[int]]]) -> Iterator[list[tuple[int, list[int]]]]:
    """(slot, ids) by increasing length -> groups of rows whose padded size rows x longest stays within
    PREFILL_TOKENS (a longer prompt alone), so that admitting a batch of long articles never prefills them all in
    one forward."""
    group: list[tuple[int, list[int]]] = []
    for item in prefill:
        if group and (len(group) + 1) * len(item[1]) > PREFILL_TOKENS:
            yield group
            group = []
        group.append(item)
    if group:
        yield group


@dataclass
class Ends:
    """What ends a row: an EOS id (None: the target's, eos_set), stop(i, tokens) True for prompt i's new tokens (a
    stop string); on_finish(i) is called as prompt i ends (a progress bar)."""

    eos: set[int] | None = None
    stop: Callable[[int, list[int]], bool] | None = None
    on_finish: Callable[[int], None] | None = None


def stop_at(tokenizer, markers: tuple[str, ...] | list[str], window: int = 48):
    """Ends.stop for stop strings: True once the text of a row's newest `window` tokens (several steps' worth)
    holds one of the markers."""
    markers = tuple(m for m in markers if m)

    def stop(_, tokens: list[int]) -> bool:
        text = tokenizer.decode(tokens[-window:], skip_special_tokens=True)
        return any(m in text for m in markers)
    return stop


class Batch:
    """B cache rows over a queue of prompts: the live rows (slot -> Row) and their random streams (prompt i's from
    seeds[i]), refilled as rows end."""

    def __init__(self, prompts: list[list[int]], steppers: list[Stepper], decoding: Decoding, seeds: list[int],
                 size: int, ends: Ends):
        self.prompts, self.steppers, self.decoding, self.seeds = prompts, steppers, decoding, seeds
        self.eos, self.stop, self.on_finish = ends.eos, ends.stop, ends.on_finish
        self.streams = Streams(size, steppers[0].device)
        self.queue: Iterator[int] = iter(range(len(prompts)))
        self.live: dict[int, Row] = {}
        self.done: list[Generation | None] = [None] * len(prompts)
        self.admit(list(range(size)))

    def admit(self, slots: list[int]) -> None:
        """The next prompts into the free slots, their prompts but the newest token prefilled together."""
        joining = []
        for slot in slots:
            index = next(self.queue, None)
            if index is None:
                break
            joining.append((slot, index))
        for s in self.steppers:
            for slot, _ in joining:
                s.reset(slot)
        prefill = sorted(((slot, self.prompts[i][:-1]) for slot, i in joining if len(self.prompts[i]) > 1),
                         key=lambda x: len(x[1]))
        device = self.steppers[0].device
        synchronize(device)  # the prefill's clock: from an idle device to its last kernel, on CPU and GPU alike
        t0 = time.perf_counter()
        for group in _prefill_groups(prefill):
            width = max(len(ids) for _, ids in group)
            x = to_device([ids + [0] * (width - len(ids)) for _, ids in group], device)  # [R, L]
            for s in self.steppers:
                s(x, [slot for slot, _ in group], [len(ids) for _, ids in group], last_only=True)
        if joining:
            self.streams.start([slot for slot, _ in joining], [self.seeds[i] for _, i in joining])
        synchronize(device)
        t1 = time.perf_counter()
        for slot, i in joining:
            ids = self.prompts[i]
            out = Generation(tokens=[], K=self.decoding.K if self.decoding.verifier in RULES else 0,
                             time_prefill=t1 - t0)
            self.live[slot] = Row(i, out, ids[-1], ids[-1:], t1)

    def finish(self, slot: int, clock: _Clock | None = None) -> None:
        """A row that ended leaves (its times: its decode from the end of its prefill, and its steps' draft and
        verify marks; its prefill was timed when it joined); its slot takes the next prompt."""
        row = self.live.pop(slot)
        synchronize(self.steppers[0].device)
        row.out.time_total = time.perf_counter() - row.started
        if clock is not None:
            row.out.time_draft = sum(clock.seconds(a, b) for a, b, _ in row.marks)
            row.out.time_verify = sum(clock.seconds(b, c) for _, b, c in row.marks)
        self.done[row.index] = row.out
        if self.on_finish is not None:
            self.on_finish(row.index)
        self.admit([slot])

    def check_stop(self, row: Row) -> None:
        """A row whose new tokens hit a stop ends (stop = "stop"; the step's tokens are kept whole)."""
        if row.out.stop == "length" and self.stop is not None and self.stop(row.index, row.out.tokens):
            row.out.stop = "stop"

    def rows(self) -> tuple[list[int], list[Row]]:
        slots = sorted(self.live)
        return slots, [self.live[s] for s in slots]

    def draws(self, slots: list[int]) -> Draws:
        """The step's random numbers of the rows in slots (greedy decoding draws none of them but synthetic
        acceptance's)."""
        return self.streams.take(index(tuple(slots), self.streams.count.device), self.decoding.K)


@dataclass
class Block:
    """Each row's draft tokens and what the draft computed for them, on the device (kmax: the longest k), and the
    step's random numbers, which drafted them and verify them."""

    tokens: torch.Tensor  # [R, kmax] long
    log_q: torch.Tensor  # [R, kmax, V]
    h: torch.Tensor  # [R, kmax, h_d]: the draft hidden state that proposed each token
    ok: torch.Tensor  # [R, kmax]: finite draft logits
    draws: Draws


@dataclass
class Scored:
    """The target's forward over [newest, d_1..d_k] of each row, on the device."""

    logits: torch.Tensor  # [R, kmax + 1, V] raw (zeroed if not finite), for the fidelity statistics
    log_p: torch.Tensor  # [R, kmax + 1, V] after temperature and top-p
    h: torch.Tensor  # [R, kmax + 1, h_t]: the target hidden state predicting each position
    ok: torch.Tensor  # [R]: finite target logits


def _padded(seqs: list[list[int]], device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """Token lists -> ids [R, max length] (0-padded) and their lengths."""
    width = max(len(s) for s in seqs)
    return to_device([s + [0] * (width - len(s)) for s in seqs], device), [len(s) for s in seqs]


def draft_block(Q: Stepper, slots: list[int], rows: list[Row], ks: list[int], sampling: Sampling,
                draws: Draws) -> Block:
    """The draft proposes k_r tokens for each row r, one forward per position for all rows, fed each row's
    pending tokens first; rows that need fewer than the longest k draft on (their extra tokens are discarded)."""
    kmax, R = max(ks), len(rows)
    if not kmax:
        return Block(torch.zeros(R, 0, dtype=torch.long, device=Q.device), torch.full(
            (R, 0, Q.vocab), -torch.inf, device=Q.device), Q.empty_hidden[:R],
            torch.ones(R, 0, dtype=torch.bool, device=Q.device), draws)
    x, lengths = _padded([r.pending for r in rows], Q.device)  # [R, 1 or 2]
    tokens, log_q, h, ok = [], [], [], []
    for j in range(kmax):
        logits, h_j = Q(x, slots, lengths, last_only=True)  # [R, 1, V], [R, 1, h_d]
        logits, ok_j = _finite(logits[:, 0])  # [R, V], [R]
        log_q_j = logprobs(sampling, logits)  # [R, V]
        x = draw(sampling, log_q_j, draws, DRAFT + j)[:, None]  # [R, 1]
        tokens.append(x), log_q.append(log_q_j), h.append(h_j), ok.append(ok_j)
        lengths = [1] * R
    return Block(torch.cat(tokens, 1), torch.stack(log_q, 1), torch.cat(h, 1), torch.stack(ok, 1), draws)


def score_block(P: Stepper, slots: list[int], rows: list[Row], block: Block, ks: list[int],
                sampling: Sampling) -> Scored:
    """One target forward over [last, d_1..d_k] per row: position i predicts draft token i + 1 (k, the bonus)."""
    last = to_device([[r.last] for r in rows], P.device)  # [R, 1]
    logits, h = P(torch.cat([last, block.tokens], 1), slots, [k + 1 for k in ks])  # [R, kmax + 1, V], [.., h_t]
    logits, ok = _finite(logits)
    return Scored(logits, logprobs(sampling, logits), h, ok)


def verify_step(block: Block, scored: Scored, w: torch.Tensor, ks: list[int], rows: list[Row],
                decoding: Decoding, p: torch.Tensor, q: torch.Tensor) -> tuple[list[Step], list[list[int]]]:
    """Verify every row's block (verifiers.verify_rows, or synthetic acceptance), then bring the step's records to
    the host in one transfer for the whole batch; raises if any logits a row used were not finite (p, q: their
    probabilities, computed once a step). Returns per row its Step and its candidates [k + 1]: every possible
    emission, the drafts up to n and next_token at n."""
    kmax = block.tokens.shape[1]
    sampling = decoding.sampling
    if decoding.synthetic_acceptance is None:
        criterion = Criterion(RULES[decoding.verifier].test, decoding.mixing, sampling.greedy, decoding.knob,
                              fly_window(decoding.K), decoding.knob2, decoding.deferral)
        logit = decoding.mixing == "logit"
        logs = Logits(scored.log_p if logit else None, block.log_q if logit else None, scored.logits)
        n, next_token, bias, kl = verify_rows(block.tokens, q, p, w, ks, draws=block.draws, criterion=criterion,
                                              logs=logs)  # [R], [R], [R, kmax + 1] x 2
    else:
        n, next_token, bias, kl = synthetic_rows(ks, p, decoding.synthetic_acceptance, greedy=sampling.greedy,
                                                 draws=block.draws)
    at = torch.arange(kmax + 1, device=p.device)
    candidates = torch.where(at == n[:, None], next_token[:, None], torch.cat([block.tokens, next_token[:, None]], 1))
    live = at[:kmax] < index(tuple(ks), p.device)[:, None]  # [R, kmax]
    ok = (block.ok.to(p.device) | ~live).all(1)  # [R]: the draft logits each row used
    tv = total_variation(p[:, :kmax], q)  # [R, kmax]: TV(p, q) at each drafted position (the static front's)
    n, ok, ok_t, tokens, ws, bias, kl, logprob, is_max, tv = _to_host(
        n, ok, scored.ok, candidates, w, bias, kl, *_fidelity(scored.logits, candidates), tv)
    steps, emitted, mixes = [], [], RULES[decoding.verifier].weight not in (None, "judge")  # w where it mixes
    for r, k in enumerate(ks):
        _raise_if_broken([ok[r]], "draft", len(rows[r].out.drafted))
        _raise_if_broken([ok_t[r]], "target", len(rows[r].out.drafted))
        m, span = int(n[r]) + 1, slice(r * (kmax + 1), (r + 1) * (kmax + 1))
        cand = [int(t) for t in tokens[span][:k + 1]]
        steps.append(Step(drafted=k, accepted=m - 1, tokens=cand[:m],
                          weights=ws[r * kmax:r * kmax + k] if mixes else [],
                          bias_tv=bias[span][:m], kl=kl[span][:m], target_logprob=logprob[span][:m],
                          target_argmax=[bool(a) for a in is_max[span][:m]],
                          tv_pq=tv[r * kmax:r * kmax + min(m, k)]))
        emitted.append(cand)
    return steps, emitted


def roll_back(P: Stepper, Q: Stepper, slot: int, row: Row, candidates: list[int], m: int) -> None:
    """Keep the step's first m candidates [k + 1]: both caches keep the sequence but its newest token, which
    becomes row.last; row.pending is what the draft has not seen of it."""
    start = P.held[slot] - (len(candidates) - 1)  # sequence position of candidates[0]: P holds all of them but one
    P.crop(start + m - 1, slot)
    Q.crop(start + m - 1, slot)
    row.last, row.pending = candidates[m - 1], candidates[Q.held[slot] - start:m]


def speculative_step(P: Stepper, Q: Stepper, batch: Batch, trained: nn.Module | None, clock: _Clock) -> None:
    """One draft-score-verify step for every live row, then each row's Generation appended and its rollback."""
    decoding = batch.decoding
    slots, rows = batch.rows()
    ks = [min(decoding.K, decoding.max_new_tokens - len(r.out.tokens) - 1) for r in rows]  # k + 1 tokens at most
    t_draft = clock()
    block = draft_block(Q, slots, rows, ks, decoding.sampling, batch.draws(slots))  # tokens [R, kmax], log_q [.., V]
    t_verify = clock()
    scored = score_block(P, slots, rows, block, ks, decoding.sampling)  # log_p [R, kmax + 1, V]
    rule = RULES[decoding.verifier]
    p, q = scored.log_p.exp(), block.log_q.exp()  # [R, kmax + 1, V], [R, kmax, V]: once a step
    w = WEIGHT_SOURCES[rule.weight or "ones"](p=p, q=q, weight=decoding.weight, trained=trained, h_target=scored.h,
                                       h_draft=block.h, knob=decoding.knob, deferral=decoding.deferral)  # [R, kmax]
    steps, candidates = verify_step(block, scored, w, ks, rows, decoding, p, q)
    t_done = clock()
    for slot, row, step, cand in zip(slots, rows, steps, candidates, strict=True):
        row.marks.append((t_draft, t_verify, t_done))
        first = not row.out.tokens
        m = row.out.append(step, batch.eos)
        if first:  # verify_step's one transfer put the step's tokens on the host
            row.out.time_first = time.perf_counter() - row.started
        batch.check_stop(row)
        if row.out.stop != "length" or len(row.out.tokens) >= decoding.max_new_tokens:
            batch.finish(slot, clock)
        else:
            roll_back(P, Q, slot, row, cand, m)


def alone_step(M: Stepper, batch: Batch, fidelity: bool) -> None:
    """One token for every live row from one model alone (the baselines); fidelity: its log p and argmax
    agreement under this model (off for the draft alone, which the target judges)."""
    slots, rows = batch.rows()
    sampling = batch.decoding.sampling
    x, lengths = _padded([r.pending for r in rows], M.device)
    logits, _ = M(x, slots, lengths, last_only=True)  # [R, 1, V]
    logits, ok = _finite(logits[:, 0])  # [R, V]
    tokens = draw(sampling, logits if sampling.greedy else logprobs(sampling, logits), batch.draws(slots), DRAFT)
    ok, tokens, logprob, is_max = _to_host(ok, tokens, *_fidelity(logits, tokens))  # one sync for the batch
    for r, (slot, row) in enumerate(zip(slots, rows, strict=True)):
        _raise_if_broken([ok[r]], "model", len(row.out.tokens))
        token = int(tokens[r])
        if not row.out.tokens:  # the transfer above put it on the host
            row.out.time_first = time.perf_counter() - row.started
        row.out.tokens.append(token)
        if fidelity:
            row.out.target_logprob.append(logprob[r])
            row.out.target_argmax.append(bool(is_max[r]))
        row.pending = [token]
        if token in batch.eos:
            row.out.stop = "eos"
        batch.check_stop(row)
        if row.out.stop != "length" or len(row.out.tokens) >= batch.decoding.max_new_tokens:
            batch.finish(slot)


@torch.inference_mode()
def generate(nets: Networks, prompts: list, decoding: Decoding, *,
             seeds: list[int] | None = None, batch_size: int = 1,
             execution: Execution = Execution(), ends: Ends | None = None) -> list[Generation]:
    """Decode every prompt (token ids) with decoding.verifier (VERIFIERS) on nets, batch_size rows at a time in
    lockstep; returns one Generation per prompt, in order. seeds[i]: prompt i's random stream (rng; default i);
    ends: what ends a row besides its token budget (Ends; default: the target's EOS ids).

    strict: w = 1 (lossless); fixed: constant weight; dynamic: w_i = head(h_target_i, h_draft_i); judge: a
    mismatch kept where head(h_target_i, h_draft_i), AutoJudge's P(it matters), is below decoding.knob; the other
    rules with decoding.knob (RULES).
    execution.capture applies to the fixed-shape steps: the draft's 1- and 2-token steps, the target's
    K + 1-token verification (see fastpath)."""
    prompts = [_prompt_ids(p) for p in prompts]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size!r} (an integer)")
    if not prompts:
        raise ValueError("no prompts to decode")
    seeds = list(range(len(prompts))) if seeds is None else list(seeds)
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    check_request(nets, max(len(p) for p in prompts), decoding, execution)
    ends = ends or Ends()
    if ends.eos is None:
        ends = dataclasses.replace(ends, eos=eos_set(nets.target, decoding.eos_token_id))
    B = min(batch_size, len(prompts))
    max_len = max(len(p) for p in prompts) + decoding.max_new_tokens + 1
    if decoding.verifier in ("autoregressive", "draft"):
        return _alone(nets, prompts, decoding, seeds, B, max_len, execution, ends)
    target, draft, vocab_size = nets.target, nets.draft, nets.vocab_size
    shared = shared_width(target, draft)
    # the target verifies K + 1 tokens (fewer at the end: padded); the draft takes 1, or 2 after a full acceptance
    P = Stepper(target, vocab_size, shared, max_len, execution, buckets=(decoding.K + 1,), rows=B)
    # a row whose step needs fewer than K drafts drafts on with the others (untouched draws, rolled back): K more
    Q = Stepper(draft, vocab_size, shared, max_len + decoding.K, execution, buckets=(1, 2), rows=B)
    trained = nets.trained.to(P.device) if nets.trained is not None else None
    clock = _Clock(P.device)
    synchronize(P.device)
    batch = Batch(prompts, [P, Q], decoding, seeds, B, ends)
    while batch.live:  # one host sync per step, in verify_step
        speculative_step(P, Q, batch, trained, clock)
    return batch.done


def _alone(nets: Networks, prompts: list[list[int]], decoding: Decoding, seeds: list[int], B: int, max_len: int,
           execution: Execution, ends: Ends) -> list[Generation]:
    """The baselines: the target alone, or the draft alone stopping at the target's EOS, its fidelity judged by
    the target in one pass per prompt."""
    target, draft, alone = nets.target, nets.draft, decoding.verifier == "draft"
    model = draft if alone else target
    M = Stepper(model, shared=shared_width(target, draft) if alone else None, max_len=max_len, execution=execution,
                buckets=(1,), rows=B)
    synchronize(M.device)
    batch = Batch(prompts, [M], decoding, seeds, B, ends)
    while batch.live:
        alone_step(M, batch, fidelity=not alone)
    if alone:
        for ids, out in zip(prompts, batch.done, strict=True):
            logits, _ = Stepper(target, nets.vocab_size)(ids + out.tokens[:-1])  # [len(ids) + n - 1, V]
            tokens = to_device(out.tokens, logits.device)  # [n]
            logprob, is_max = _to_host(*_fidelity(logits[len(ids) - 1:], tokens))
            out.target_logprob, out.target_argmax = logprob, [bool(a) for a in is_max]
    return batch.done


def speculative_generate(target: nn.Module, draft: nn.Module | None, input_ids, decoding: Decoding, *,
                         trained: nn.Module | None = None, seed: int = 0,
                         vocab_size: int | None = None, execution: Execution = Execution()) -> Generation:
    """Decode one prompt (generate with a batch of one): the new tokens and per-step statistics."""
    return generate(Networks(target, draft, trained, vocab_size), [input_ids], decoding, seeds=[seed],
                    execution=execution)[0]

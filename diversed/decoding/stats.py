"""Statistics of a decode: what each step records (`Step`), one prompt's record (`Generation`) and the pooled
run-level metrics (`summarize`). Every formula is written once, below.

Notation, per verification step s of a speculative decode: k_s drafted tokens (the draft length K, fewer at
the end of the sequence), n_s of them accepted (the accepted prefix), m_s tokens emitted (n_s + 1: the accepted
drafts and a correction or bonus token; fewer when an EOS ends the sequence). An autoregressive decode has one
step per token and no drafts.

Against vLLM's spec-decode metrics (`SpecDecodingStats` / `SpecDecodingMetrics`):
- draft_acceptance_rate is vLLM's "draft acceptance rate" (accepted / draft tokens).
- mean_acceptance_length counts emitted tokens; vLLM's is 1 + accepted / drafts, which differs only where an
  EOS cut a step short.
- acceptance_by_position is conditional on reaching the position (tokens 1..i-1 accepted); vLLM's
  per-position rate is per draft (accepted at i / drafts), the product of ours over positions 1..i.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def rate(hits: float, trials: float) -> float:
    """hits / trials; nan without trials."""
    return hits / trials if trials else float("nan")


def mean(xs: list[float]) -> float:
    """The mean of xs; nan when empty."""
    return rate(sum(xs), len(xs))


def position_counts(drafted: list[int], accepted: list[int], K: int) -> list[tuple[int, int]]:
    """Per draft position i = 1..K: (steps accepting i, steps reaching i) = (#{s: n_s >= i},
    #{s: k_s >= i and n_s >= i - 1}): a step reaches i when it drafted i tokens and accepted 1..i-1."""
    return [(sum(n >= i for n in accepted),
             sum(k >= i and n >= i - 1 for k, n in zip(drafted, accepted, strict=True))) for i in range(1, K + 1)]


@dataclass
class Step:
    """What one speculative step records, on the host."""

    drafted: int  # k: draft tokens proposed
    accepted: int  # n: leading draft tokens accepted
    tokens: list[int]  # emitted: the n accepted drafts, then the correction (n < k) or bonus (n = k) token
    weights: list[float]  # [k] w at each drafted position
    bias_tv: list[float]  # per emitted token: TV(nu, p) at its position (0 for a bonus token)
    target_logprob: list[float]  # per emitted token: log p_target(token) at T = 1
    target_argmax: list[bool]  # per emitted token: is it the target's greedy choice?
    tv_pq: list[float] = field(default_factory=list)  # per tested position (min(n + 1, k)): TV(p, q) there
    kl: list[float] = field(default_factory=list)  # per emitted token: KL(nu || p) in nats (0 for a bonus token)


@dataclass
class Generation:
    """New tokens of one prompt and the statistics of the run that made them."""

    tokens: list[int]
    K: int
    drafted: list[int] = field(default_factory=list)  # per step: k_s
    accepted: list[int] = field(default_factory=list)  # per step: n_s
    weights: list[list[float]] = field(default_factory=list)  # per step: w at each drafted position
    bias_tv: list[float] = field(default_factory=list)  # per emitted token: TV(nu, p)
    target_logprob: list[float] = field(default_factory=list)  # per token: log p_target(token) at T = 1
    target_argmax: list[bool] = field(default_factory=list)  # per token: is it the target's greedy choice?
    tv_pq: list[float] = field(default_factory=list)  # per tested position of every step: TV(p, q)
    kl: list[float] = field(default_factory=list)  # per emitted token: KL(nu || p) in nats
    time_draft: float = 0.0
    time_verify: float = 0.0
    time_total: float = 0.0  # its decode: from the end of its prefill to its last token (synchronised at both ends)
    time_prefill: float = 0.0  # the prefill forward(s) of the group it joined with (its own at batch 1)
    time_first: float = 0.0  # from the end of its prefill to its first token on the host (TTFT = prefill + this)
    stop: str = "length"  # "eos", "stop" (a stop string: engine.Ends) or "length"

    def append(self, step: Step, eos: set[int]) -> int:
        """Append one speculative step, its tokens cut after the first EOS (then stop = "eos"); returns m, the
        number of tokens kept."""
        cut = next((j for j, t in enumerate(step.tokens) if t in eos), None)
        m = len(step.tokens) if cut is None else cut + 1
        if cut is not None:
            self.stop = "eos"
        self.drafted.append(step.drafted)
        self.accepted.append(step.accepted)
        self.weights.append(step.weights)
        self.tokens.extend(step.tokens[:m])
        self.bias_tv.extend(step.bias_tv[:m])
        self.target_logprob.extend(step.target_logprob[:m])
        self.target_argmax.extend(step.target_argmax[:m])
        self.tv_pq.extend(step.tv_pq)
        self.kl.extend(step.kl[:m])
        return m

    @property
    def steps(self) -> int:
        """Verification steps: one per forward of the target (one per token without drafts)."""
        return len(self.drafted) if self.drafted else len(self.tokens)

    @property
    def time_other(self) -> float:
        """time_total - time_draft - time_verify: rollback, bookkeeping."""
        return self.time_total - self.time_draft - self.time_verify

    @property
    def draft_acceptance_rate(self) -> float:
        """alpha = sum_s n_s / sum_s k_s (nan without drafts)."""
        return rate(sum(self.accepted), sum(self.drafted))

    @property
    def mean_acceptance_length(self) -> float:
        """tau = emitted tokens / steps = sum_s m_s / S (the correction or bonus token included)."""
        return rate(len(self.tokens), self.steps)

    @property
    def acceptance_by_position(self) -> list[float]:
        """[K]: P(draft token i accepted | tokens 1..i-1 accepted), as counted by position_counts."""
        return [rate(*c) for c in position_counts(self.drafted, self.accepted, self.K)]

    @property
    def conditional_acceptance(self) -> float:
        """The per-position acceptance pooled over the positions reached: sum_i accepted_i / sum_i reached_i =
        sum_s n_s / sum_s min(k_s, n_s + 1). The alpha of the i.i.d. analytic bound (bench.ideal_speedup)."""
        counts = position_counts(self.drafted, self.accepted, self.K)
        return rate(sum(h for h, _ in counts), sum(t for _, t in counts))

    @property
    def tokens_per_s(self) -> float:
        """New tokens / time_total (wall clock of the decode steps; the prefill is time_prefill, apart)."""
        return rate(len(self.tokens), self.time_total)

    def stats(self) -> dict:
        """Every metric, by the names manifests and generations.jsonl use. mean_weight: mean w over drafted
        positions; bias_tv, kl, target_logprob, target_argmax_agreement: means over emitted tokens."""
        return {
            "new_tokens": len(self.tokens), "steps": self.steps, "stop": self.stop,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_by_position": self.acceptance_by_position,
            "mean_weight": mean([w for ws in self.weights for w in ws]),
            "bias_tv": mean(self.bias_tv), "kl": mean(self.kl),
            "target_logprob": mean(self.target_logprob),
            "target_argmax_agreement": mean([float(a) for a in self.target_argmax]),
            "tokens_per_s": self.tokens_per_s,
            "time_total": self.time_total, "time_draft": self.time_draft,
            "time_verify": self.time_verify, "time_other": self.time_other, "time_prefill": self.time_prefill,
        }


def pool(gens: list[Generation]) -> Generation:
    """The generations of several prompts as one: their steps, tokens and times concatenated."""
    return Generation(
        tokens=[t for g in gens for t in g.tokens], K=max((g.K for g in gens), default=0),
        drafted=[k for g in gens for k in g.drafted], accepted=[n for g in gens for n in g.accepted],
        weights=[ws for g in gens for ws in g.weights], bias_tv=[b for g in gens for b in g.bias_tv],
        kl=[x for g in gens for x in g.kl],
        target_logprob=[x for g in gens for x in g.target_logprob],
        target_argmax=[a for g in gens for a in g.target_argmax],
        time_draft=sum(g.time_draft for g in gens), time_verify=sum(g.time_verify for g in gens),
        time_total=sum(g.time_total for g in gens), time_prefill=sum(g.time_prefill for g in gens),
        time_first=sum(g.time_first for g in gens))


def summarize(gens: list[Generation]) -> dict:
    """Run-level metrics over several prompts: Generation.stats() of the pooled counts (pool), not a mean of
    per-prompt ratios, plus conditional_acceptance."""
    g = pool(gens)
    s = g.stats()
    keys = ("new_tokens", "steps", "draft_acceptance_rate", "mean_acceptance_length", "acceptance_by_position")
    return {"prompts": len(gens), **{k: s[k] for k in keys}, "conditional_acceptance": g.conditional_acceptance,
            **{k: s[k] for k in ("mean_weight", "bias_tv", "kl", "target_logprob", "target_argmax_agreement",
                                 "tokens_per_s", "time_total", "time_draft", "time_verify", "time_prefill")}}

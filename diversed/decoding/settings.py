"""What a decode computes and how it runs, as plain data: the verifiers (one `Rule` each, the one place a verifier
is added), the sampling filters (`Sampling`), a decode's settings (`Decoding`), the engine's execution
(`Execution`) and the names of the models and dtypes a pair may take. Imports no torch, so that the workflow's
plan (diversed.experiment.plan), the config schema and the command line read them without loading the ML stack.

A rule names its math (an ensemble weight of verifiers.WEIGHT_SOURCES, or another test of verifiers.TESTS); everything
else that lists verifiers reads this table: the command line's choices, the config schema's methods and sweep
families, the sweep grid, the figures' legends and the report's names. The baselines (the target alone, the
draft alone) and the fine-tuned draft are methods, not rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from diversed.utils import finite, option, safetensors_metadata

MIXINGS = ("linear", "logit")  # nu = w p + (1 - w) q, or the softmax of w log p + (1 - w) log q
DEFERRALS = ("chow", "diff", "opt", "token")  # speculative cascades' deferrals (verifiers.defer, token_cascade)
DEFERRAL = DEFERRALS[0]  # the default: Chow's rule (a run of another verifier records it too, unused)
CAPTURES = ("none", "graph", "compile")  # the fast path's fixed-shape steps: eager, CUDA graphs, torch.compile
DTYPES = ("float32", "bfloat16", "float16", "float64")  # a pair's weights: torch dtypes by name
EMBEDDED_DRAFTS = {"embedded": "distilled", "embedded-weak": "truncated"}  # the embedded pair's drafts
DEFAULT_DRAFT_LAYERS = 2  # the embedded draft's decoder layers, chosen by measurement: README "The embedded pair"


@dataclass(frozen=True)
class Rule:
    """A speculative verifier.

    label: its name in tables, figures and the report; weight: the ensemble weight w [R, k] it verifies against,
    by name in verifiers.WEIGHT_SOURCES (None: it tests drafts another way); test: how verifiers.verify_rows tests a
    draft (verifiers.TESTS); knob: what Decoding.knob sets (None: no knob; a rule with a knob is a sweep family,
    its setting chosen on dev) with the range it must lie in; knob2: what Decoding.knob2 sets, a second setting
    (None: none; a sweep leaves it at its default) with its range; relaxes: the way the knob (fixed's: w) moves to
    accept more, "up" or "down" (a sweep certifies the family's points from the other end); marker: its marker in
    the figures; source:
    the paper it comes from; checked: the source's code this rule was read against, line by line (or why none
    settles it), the README table's last column."""

    label: str
    weight: str | None = "ones"
    test: str = "ensemble"
    knob: str | None = None
    low: float = 0.0
    high: float = 1.0
    integer: bool = False
    knob2: str | None = None
    low2: float = 0.0
    high2: float = 1.0
    relaxes: str = "up"
    marker: str = "o"
    source: str = ""
    checked: str = ""

    def setting(self, x) -> str:
        """A knob value named as its source names it, with its unit: 'KL budget D = KL(p || pi) (nats) = 0.1'."""
        return f"{self.knob} = {x:g}" if self.knob and x == x else ""

    def swept(self) -> str:
        """The rule's label with the knob its sweep varies: 'Mentored decoding (KL budget D = KL(p || pi) (nats))'."""
        return f"{self.label} ({self.knob})" if self.knob else self.label

    def check_knob(self, verifier: str, x) -> None:
        """Raise unless x is a valid knob of this rule (None where it has none)."""
        if self.knob is None:
            if x is not None:
                raise ValueError(f"knob is only used by the verifiers {', '.join(FAMILIES)}, not {verifier!r}")
            return
        if x is None:
            raise ValueError(f"verifier {verifier!r} needs --knob ({self.knob}, in [{self.low:g}, {self.high:g}])")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not self.low <= x <= self.high or (
                self.integer and x != int(x)):
            raise ValueError(f"{verifier}'s knob {self.knob} must be {'an integer ' if self.integer else ''}in "
                             f"[{self.low:g}, {self.high:g}], got {x!r}")

    def check_knob2(self, verifier: str, x) -> None:
        """Raise unless x is None or a valid second setting of this rule."""
        if x is None:
            return
        if self.knob2 is None:
            raise ValueError(f"knob2 is only used by the verifiers {', '.join(v for v, r in RULES.items() if r.knob2)}"
                             f", not {verifier!r}")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not self.low2 <= x <= self.high2:
            raise ValueError(f"{verifier}'s knob2 {self.knob2} must be in [{self.low2:g}, {self.high2:g}], got {x!r}")


INF = float("inf")
RULES: dict[str, Rule] = {
    # w = 1: lossless
    "strict": Rule("SD", "ones", marker="o", source="Leviathan et al. 2023, Alg. 1",
                 checked="none needed: Algorithm 1, exact (tested)"),
    "fixed": Rule("Static ensemble (fixed w)", "constant", relaxes="down", marker="x", source="the static ensemble",
                 checked="the authors' `train/models.py` (logit mixing; their static driver is not public)"),
    # w(h_target, h_draft)
    "dynamic": Rule("DIVERSED", "head", marker="*", source="Wang et al. 2026",
                 checked="the authors' `train/models.py`, `rl_train.py` (docs/AUTHORS.md)"),
    # speculative cascades: w = delta(q, p) in {0, 1}, the deferral (Decoding.deferral) at threshold alpha;
    # chow from 0 (strict) to 1 (the draft), opt unbounded
    "cascade": Rule("Speculative cascade", "deferral", knob="alpha", low=-INF, high=INF, marker="P",
                    source="Narasimhan et al., ICLR 2025",
                checked="no code released: sections 4-5"),
    "lenient": Rule("Lenient SD", None, "lenient", knob="lenience l", relaxes="down", marker="^",
                    source="Leviathan et al. 2023, A.5",
                checked="no code released: A.5 (its correction unstated)"),  # min(1, p / (l q)); l = 1 is strict
    "typical": Rule("Typical acceptance", None, "typical", knob="epsilon", relaxes="down", marker="<",
                    source="Medusa (Cai et al. 2024), 3.3.1",
                checked="Medusa `medusa/model/utils.py`"),  # p(x) > min(epsilon, sqrt(epsilon) exp(-H(p)))
    # x among p's top k and p(x) >= max p - delta (TensorRT-LLM's relaxed acceptance; delta 1: the top k alone)
    "topk": Rule("Top-k acceptance", None, "topk", knob="k", low=1, high=INF, integer=True,
                 knob2="margin delta (probability)", marker=">",
                 source="AutoJudge's baseline (Garipov et al. 2025); TensorRT-LLM's margin",
                checked="TensorRT-LLM `mtpKernels.cu`"),
    # the K drafts verified jointly: an exact sampler of p that accepts at least as many tokens as strict on average
    "block": Rule("Block verification", None, "block", marker="p", source="Sun et al., ICLR 2025",
                checked="no code released: Algorithm 2, exact (tested)"),
    # u <= p(x) / q(x) + beta (1 - max p): the bar drops where the target is unsure; beta = 0 is strict
    "ears": Rule("EARS", None, "ears", knob="beta", high=INF, marker="d", source="EARS, arXiv 2512.13194",
                checked="vllm-ascend#5587 `rejection_sampler.py` (it admits p(x) = 0; ours not)"),
    # drafts kept without a coin while their divergence (0.5 KL(m || p) + 0.5 KL(m || q), nats) is <= T; at the first
    # over T, a draw from p; T = 0 an exact sampler of p
    "fuzzy": Rule("Fuzzy SD", None, "fuzzy", knob="divergence bound T (nats)", high=INF, marker="8",
                  source="Fuzzy Speculative Decoding, ACL Findings 2025",
                checked="maxholsman/fsd `fsd_utils.py`"),
    # speculative sampling towards the pi of largest acceptance with KL(p || pi) <= D nats; D = 0 is strict
    "mentored": Rule("Mentored decoding", None, "mentored", knob="KL budget D = KL(p || pi) (nats)", high=INF,
                     marker="H", source="mentored decoding (Tran-Thien 2023)",
                checked="vivien000/mentored_decoding `notebook.ipynb`, `proof.pdf`"),
    # a position whose target logits' ratio z2 / z1 exceeds theta keeps a draft among its top 2 without a coin;
    # else speculative sampling with MARS's correction
    "mars": Rule("MARS", None, "mars", knob="logit ratio theta", low=-INF, high=INF, relaxes="down", marker="v",
                 source="MARS (Song et al., arXiv 2601.15498)",
                checked="5SSjw/MARS `mars/model/utils.py`"),
    # p(x) >= t_single, else accept with probability min(1, p(x) / t_acc); the correction p without x
    "threshold": Rule("Acceptance thresholds", None, "threshold", knob="t_acc", low=1e-6, knob2="t_single",
                      relaxes="down", marker="X", source="SGLang's speculative acceptance thresholds",
                checked="SGLang `speculative_sampling.cuh`"),
    # a strict rejection deferred where the target's top-3 entropy >= the threshold and the next W drafts pass
    "fly": Rule("FLy", None, "fly", knob="entropy threshold", high=INF, relaxes="down", marker="h",
                source="FLy, as vLLM's v1/spec_decode/fly.py",
                checked="vLLM `v1/spec_decode/fly.py`"),
    # a learned rival: a mismatch kept where AutoJudge's classifier (Decoding's head) puts the chance that it
    # changes the answer below the threshold; threshold 0 is strict
    "judge": Rule("AutoJudge", "judge", "judge", knob="threshold", marker="D",
                  source="Garipov et al., NeurIPS 2025 (AutoJudge)",
                checked="AutoJudge's greedy rule; no source settles the sampled form (ours)"),
}
# the trained modules a rule's weight (Rule.weight) reads, each by the RunConfig field and flag that names its file
TRAINED = {"head": "weight head", "judge": "AutoJudge classifier"}
TRAINED_FORMATS = {"head": "diversed-head-v1", "judge": "diversed-judge-v1"}  # their files' format tags (head.py)


def check_trained_file(path, kind: str) -> None:
    """Refuse (reading only the file's header, no torch) a file that is not a trained module of `kind` (a key of
    TRAINED): a judge given as --head, a text file, another safetensors file."""
    fmt = safetensors_metadata(path).get("format")
    if fmt != TRAINED_FORMATS[kind]:
        other = next((k for k, f in TRAINED_FORMATS.items() if f == fmt), None)
        raise ValueError(f"--{kind} {path} is not {article(TRAINED[kind])} file" +
                         (f": it is {article(TRAINED[other])} (--{other})" if other else f" (format {fmt!r})"))


def article(noun: str) -> str:
    """The noun with its indefinite article: a weight head, an AutoJudge classifier."""
    return f"{'an' if noun[0].lower() in 'aeiou' else 'a'} {noun}"


def trained_module(verifier: str) -> str | None:
    """The trained module a verifier needs (a key of TRAINED: DIVERSED's head, AutoJudge's judge), None if none."""
    weight = RULES[verifier].weight if verifier in RULES else None
    return weight if weight in TRAINED else None


# one model decoding alone (no draft length K), by label
ALONE: dict[str, str] = {"autoregressive": "Target only", "draft": "Draft only"}
VERIFIERS = (*ALONE, *RULES)
FAMILIES = tuple(v for v, rule in RULES.items() if rule.knob)  # swept by their knob, beside the fixed w
# the methods a workflow config runs, by label, in the order of every table and legend: every verifier, and
# strict with the fine-tuned draft
METHODS: dict[str, str] = {**ALONE, "strict": RULES["strict"].label, "finetuned": "SD with fine-tuned draft",
                           **{v: r.label for v, r in RULES.items()}}
LEARNED = tuple(v for v in RULES if trained_module(v))  # DIVERSED and AutoJudge: a module trained per task
GIVEN = ("fixed", *FAMILIES)  # the verifiers a config may also run at a setting it gives (workflow key `given`)


@dataclass(frozen=True)
class Method:
    """What the tables call a run, and its one label: its base (a method of METHODS: a verifier, or finetuned), the
    setting the config gives it where the config gives one (`given`: w of fixed, a family's knob) and, for a learned
    verifier (DIVERSED's head, AutoJudge's judge: LEARNED), the task its trained module was trained on where it is
    another task's (`head_task`). Labels: strict, fixed-0.7, cascade-0.5, dynamic@cnndm, judge@gsm8k."""

    base: str
    given: float | None = None
    head_task: str | None = None

    def __post_init__(self):
        if self.base not in METHODS:
            raise ValueError(f"unknown method {self.base!r}; allowed: {', '.join(METHODS)}")
        if self.given is not None and self.base not in GIVEN:
            raise ValueError(f"only {', '.join(GIVEN)} run at a given setting, not {self.base!r}")
        if self.head_task is not None and self.base not in LEARNED:
            raise ValueError(f"only {' and '.join(LEARNED)} decode with another task's trained module, not "
                             f"{self.base!r}")

    @property
    def label(self) -> str:
        """The method's label in paths, runs and tables."""
        return self.base + (f"-{float(self.given):g}" if self.given is not None else "") + (
            f"@{self.head_task}" if self.head_task is not None else "")

    @classmethod
    def parse(cls, label: str) -> Method:
        """The method of a label (the inverse of `label`); ValueError naming the label where it is none."""
        rest, _, head_task = label.partition("@")
        base, _, given = rest.partition("-")
        try:
            return cls(base, float(given) if given else None, head_task or None)
        except ValueError as e:
            raise ValueError(f"method label {label!r}: {e}") from None

    @property
    def name(self) -> str:
        """The method's name in tables, figures and the report; a given setting's with its value."""
        if self.given is None:
            return METHODS[self.base]
        knob = "w" if self.base == "fixed" else RULES[self.base].knob
        return f"{METHODS[self.base]}, {knob} = {self.given:g} (given)"


@dataclass(frozen=True)
class Sampling:
    """How a token is drawn from logits: temperature (0 = greedy), then top_k (0: every token) and nucleus top_p,
    applied alike to p and q (strict speculative sampling is then exact for the filtered p)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):  # NaN included
            raise ValueError(f"temperature must be >= 0 (0 = greedy) and finite, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0: no top-k filter), got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _count(name: str, x, low: int = 1) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise ValueError(f"{name} must be >= {low}, got {x!r} (an integer)")


@dataclass(frozen=True)
class Decoding:
    """What a decode computes, validated when built, passed whole and recorded whole in a run's manifest.

    verifier: one of VERIFIERS; K: draft length; weight: w of the fixed verifier; mixing: how nu mixes p and q;
    knob: the setting of a verifier whose rule has one (RULES: cascade's alpha, lenient's l, typical's epsilon,
    topk's k, EARS' beta, ...); knob2: a rule's second setting (topk's margin r, threshold's t_single; None: its
    default); deferral: cascade's deferral (DEFERRALS);
    eos_token_id: the ids that end a sequence (None: the target's generation config's; () never stops);
    synthetic_acceptance = a replaces verification by accepting each draft with probability a (timing at real
    sizes with random weights: verifiers.synthetic_rows)."""

    verifier: str = "strict"
    K: int = 5
    max_new_tokens: int = 128
    sampling: Sampling = Sampling()
    weight: float | None = None
    mixing: str = "linear"
    knob: float | None = None
    knob2: float | None = None
    deferral: str = DEFERRAL
    eos_token_id: tuple[int, ...] | None = None
    synthetic_acceptance: float | None = None

    def __post_init__(self):
        if self.eos_token_id is not None:
            eos = (self.eos_token_id,) if isinstance(self.eos_token_id, int) else tuple(self.eos_token_id)
            object.__setattr__(self, "eos_token_id", tuple(int(t) for t in eos))
        v = self.verifier
        if v not in VERIFIERS:
            raise ValueError(f"unknown verifier {v!r}; allowed: {', '.join(VERIFIERS)}")
        for name in ("weight", "knob", "knob2"):
            finite(name, getattr(self, name))
        if self.mixing not in MIXINGS:
            raise ValueError(f"unknown mixing {self.mixing!r}; allowed: {', '.join(MIXINGS)}")
        _count("max_new_tokens", self.max_new_tokens)
        if not isinstance(self.sampling, Sampling):
            raise TypeError(f"sampling must be a settings.Sampling, got {type(self.sampling).__name__}")
        if v in RULES:
            _count("draft length K", self.K)
        self._check_weight()
        if v in RULES:
            RULES[v].check_knob(v, self.knob)
            RULES[v].check_knob2(v, self.knob2)
        elif self.knob2 is not None:
            raise ValueError(f"knob2 is only used by speculative verifiers, not {v!r}")
        elif self.knob is not None:
            raise ValueError(f"knob is only used by the verifiers {', '.join(FAMILIES)}, not {v!r}")
        if v == "fly" and isinstance(self.K, int) and self.K < 2:
            raise ValueError(f"verifier 'fly' needs K >= 2 (its window is min(6, K - 1)), got K = {self.K}")
        if self.deferral not in DEFERRALS:
            raise ValueError(f"unknown deferral {self.deferral!r}; allowed: {', '.join(DEFERRALS)}")
        if self.deferral != DEFERRAL and v != "cascade":
            raise ValueError(f"deferral is only used by the 'cascade' verifier, not {v!r}")
        a = self.synthetic_acceptance
        if a is not None and not 0 <= a <= 1:
            raise ValueError(f"synthetic acceptance must be in [0, 1], got {a}")

    def _check_weight(self) -> None:
        v, w = self.verifier, self.weight
        if v == "fixed" and w is None:
            raise ValueError("verifier 'fixed' needs --weight w in [0, 1] (weight= in Python)")
        if w is not None:
            if v != "fixed":
                raise ValueError(f"weight is only used by the 'fixed' verifier, not {v!r}")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
                raise ValueError(f"weight w must be in [0, 1], got {w!r}")

    def manifest(self) -> dict:
        """The settings as a manifest records them."""
        return dataclasses.asdict(self) | {"eos_token_id": None if self.eos_token_id is None
                                           else list(self.eos_token_id)}


@dataclass(frozen=True)
class Execution:
    """How the engine runs, not what it computes: recorded in a run's manifest, never part of its run id.

    capture: "none" / "graph" / "compile" for the fast path's fixed-shape steps (fastpath);
    fastpath: the static-cache fast path for Llama / Qwen3, else transformers' modules (it changes the order
    of float sums, so the last bits of the logits); threads: torch's intra-op threads (recorded, not set).
    """

    capture: str = option("none", "the fast path's fixed-shape steps: eager, one CUDA graph each (GPU), or "
                                  "torch.compile (+ CUDA graphs on a GPU)", choices=CAPTURES)
    fastpath: bool = option(True, "the static-cache fast path (Llama, Qwen3); --no-fastpath: transformers' modules")
    threads: int | None = None

    @classmethod
    def here(cls, capture: str = "none", fastpath: bool = True) -> Execution:
        """The settings an entry point was given (the --capture and --no-fastpath flags of generate, sweep-weight,
        train and bench; the lm-eval model's args), with torch's thread count; resolved once and passed down."""
        import torch

        if capture not in CAPTURES:
            raise ValueError(f"unknown capture {capture!r}; allowed: {', '.join(CAPTURES)}")
        return cls(capture, bool(fastpath), torch.get_num_threads())

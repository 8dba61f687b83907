"""The small modules a verifier reads from the pair's last hidden states at a draft position: DIVERSED's weight head
f_theta (h_target, h_draft) -> w, the weight on the target, and AutoJudge's classifier (h_target, h_draft) -> the
probability that a mismatch there matters for the task's answer. Each is bound to the pair it was trained for and
saved as one small safetensors file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import ClassVar

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from diversed.decoding.models import fingerprint, hidden_size
from diversed.decoding.settings import TRAINED, TRAINED_FORMATS
from diversed.utils import atomic_path


class PairModule(nn.Module):
    """A module over a pair's last hidden states (h_target, h_draft), bound to the pair it was trained for."""

    FORMAT: ClassVar[str]  # its file's format tag
    WHAT: ClassVar[str]  # what it is, in messages

    def __init__(self, h_target: int, h_draft: int, outputs: int):
        """A zero-initialised Linear `proj` from both hidden states (h_t + h_d wide) to `outputs`."""
        super().__init__()
        self.h_target, self.h_draft = h_target, h_draft
        self.proj = nn.Linear(h_target + h_draft, outputs)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        self.pair: dict[str, str] = {}  # fingerprints of the pair it was trained for (set by bind/load)

    def bind(self, target: nn.Module, draft: nn.Module) -> PairModule:
        """Record the pair it belongs to (checked again on load and by the engine)."""
        self.pair = {"target": fingerprint(target), "draft": fingerprint(draft)}
        return self

    def check_pair(self, target: nn.Module, draft: nn.Module) -> None:
        """Raise if it was made for another draft/target pair or other hidden sizes."""
        h_t, h_d = hidden_size(target), hidden_size(draft)
        if (h_t, h_d) != (self.h_target, self.h_draft):
            raise ValueError(
                f"{self.WHAT} expects hidden sizes (target {self.h_target}, draft {self.h_draft}), "
                f"the models have (target {h_t}, draft {h_d})"
            )
        if self.pair:
            got = {"target": fingerprint(target), "draft": fingerprint(draft)}
            for role in ("target", "draft"):
                if got[role] != self.pair[role]:
                    raise ValueError(
                        f"{self.WHAT} was trained for another {role} model (fingerprint {self.pair[role][:12]}, "
                        f"this {role} is {got[role][:12]}); train one for this pair"
                    )

    def save(self, path: str | os.PathLike, **meta) -> None:
        """Write weights + pair fingerprints + free-form metadata to one small safetensors file."""
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.state_dict().items()}
        metadata = {"format": self.FORMAT, "h_target": str(self.h_target), "h_draft": str(self.h_draft),
                    "pair": json.dumps(self.pair), "meta": json.dumps(meta, default=str),
                    "tensors_sha256": tensors_sha256(state)}
        with atomic_path(path) as tmp:
            save_file(state, str(tmp), metadata=metadata)


class WeightHead(PairModule):
    """DIVERSED's head: one Linear over both last hidden states, then softmax over (w_draft, w_target); w = w_target.

    Zero-initialised, so w = 0.5 everywhere before training. 2 (h_t + h_d) + 2 parameters.
    """

    FORMAT, WHAT = TRAINED_FORMATS["head"], TRAINED["head"]

    def __init__(self, h_target: int, h_draft: int):
        super().__init__(h_target, h_draft, 2)

    def forward(self, h_target: torch.Tensor, h_draft: torch.Tensor) -> torch.Tensor:
        """h_target [..., h_t], h_draft [..., h_d] -> w [...] in (0, 1)."""
        x = torch.cat([h_target, h_draft], dim=-1).to(self.proj.weight.dtype)
        return self.proj(x).softmax(dim=-1)[..., 1]


class Judge(PairModule):
    """AutoJudge's classifier (Garipov et al., NeurIPS 2025): a logistic regression on the standardised
    [h_draft; h_target], the probability that a draft/target mismatch at this position changes the task's answer.
    (h_t + h_d) + 1 parameters, and the features' mean and standard deviation."""

    FORMAT, WHAT = TRAINED_FORMATS["judge"], TRAINED["judge"]

    def __init__(self, h_target: int, h_draft: int):
        super().__init__(h_target, h_draft, 1)
        self.register_buffer("mean", torch.zeros(h_draft + h_target, device="cpu"))  # moved with the module
        self.register_buffer("std", torch.ones(h_draft + h_target, device="cpu"))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Features [..., h_d + h_t] ([h_draft; h_target]) -> the classifier's logits [...]."""
        return self.proj((x.to(self.proj.weight.dtype) - self.mean) / self.std)[..., 0]

    def forward(self, h_target: torch.Tensor, h_draft: torch.Tensor) -> torch.Tensor:
        """h_target [..., h_t], h_draft [..., h_d] -> P(the mismatch matters) [...] in (0, 1)."""
        return self.logits(torch.cat([h_draft, h_target], dim=-1)).sigmoid()


def tensors_sha256(state: dict[str, torch.Tensor]) -> str:
    """A hash of a module's tensors (names, shapes and float32 bytes), written into its file and checked on load:
    a damaged file is refused rather than decoded with a wrong w."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().float().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}\0".encode() + t.numpy().tobytes())
    return h.hexdigest()


KINDS = {cls.FORMAT: cls for cls in (WeightHead, Judge)}
MODULES = {"head": WeightHead, "judge": Judge}  # each of settings.TRAINED's modules


def load_head(path: str | os.PathLike, target: nn.Module | None = None, draft: nn.Module | None = None,
              kind: type[PairModule] = WeightHead) -> PairModule:
    """Load a head of `kind` (WeightHead, Judge); when the pair is given, refuse one trained for another pair."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{kind.WHAT} file not found: {path}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        state = load_file(str(path))
    except Exception as e:
        raise ValueError(f"{kind.WHAT} file {path} is not a readable safetensors file: {e}") from e
    if metadata.get("format") != kind.FORMAT:
        other = KINDS.get(metadata.get("format"))
        raise ValueError(f"{path} is not a diversed {kind.WHAT} (format {metadata.get('format')!r}, expected "
                         f"{kind.FORMAT!r})" + (f": it is a {other.WHAT}" if other else ""))
    if metadata.get("tensors_sha256") != tensors_sha256(state):
        raise ValueError(f"{kind.WHAT} file {path}: its tensors do not match the hash written with them (damaged"
                         + ("" if metadata.get("tensors_sha256") else ", or written before files carried one")
                         + "); train it again")
    head = kind(int(metadata["h_target"]), int(metadata["h_draft"]))
    head.load_state_dict(state)
    head.pair = json.loads(metadata["pair"])
    head.meta = json.loads(metadata.get("meta", "{}"))
    if target is not None and draft is not None:
        head.check_pair(target, draft)
    return head

"""The DIVERSED weight head f_theta: (h_target, h_draft) -> w, the per-position weight on the target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from diversed.decoding.models import fingerprint, hidden_size
from diversed.utils import atomic_path

FORMAT = "diversed-head-v1"


class WeightHead(nn.Module):
    """One Linear over both last hidden states, then softmax over (w_draft, w_target); w = w_target.

    Zero-initialised, so w = 0.5 everywhere before training. 2 (h_t + h_d) + 2 parameters.
    """

    def __init__(self, h_target: int, h_draft: int):
        super().__init__()
        self.h_target, self.h_draft = h_target, h_draft
        self.proj = nn.Linear(h_target + h_draft, 2)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        self.pair: dict[str, str] = {}  # fingerprints of the pair it was trained for (set by bind/load)

    def forward(self, h_target: torch.Tensor, h_draft: torch.Tensor) -> torch.Tensor:
        """h_target [..., h_t], h_draft [..., h_d] -> w [...] in (0, 1)."""
        x = torch.cat([h_target, h_draft], dim=-1).to(self.proj.weight.dtype)
        return self.proj(x).softmax(dim=-1)[..., 1]

    def bind(self, target: nn.Module, draft: nn.Module) -> WeightHead:
        """Record the pair this head belongs to (checked again on load and by the engine)."""
        self.pair = {"target": fingerprint(target), "draft": fingerprint(draft)}
        return self

    def check_pair(self, target: nn.Module, draft: nn.Module) -> None:
        """Raise if this head was made for another draft/target pair or other hidden sizes."""
        h_t, h_d = hidden_size(target), hidden_size(draft)
        if (h_t, h_d) != (self.h_target, self.h_draft):
            raise ValueError(
                f"weight head expects hidden sizes (target {self.h_target}, draft {self.h_draft}), "
                f"the models have (target {h_t}, draft {h_d})"
            )
        if self.pair:
            got = {"target": fingerprint(target), "draft": fingerprint(draft)}
            for role in ("target", "draft"):
                if got[role] != self.pair[role]:
                    raise ValueError(
                        f"weight head was trained for another {role} model (fingerprint {self.pair[role][:12]}, "
                        f"this {role} is {got[role][:12]}); train a head for this pair"
                    )

    def save(self, path: str | os.PathLike, **meta) -> None:
        """Write weights + pair fingerprints + free-form metadata to one small safetensors file."""
        metadata = {"format": FORMAT, "h_target": str(self.h_target), "h_draft": str(self.h_draft),
                    "pair": json.dumps(self.pair), "meta": json.dumps(meta, default=str)}
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.state_dict().items()}
        with atomic_path(path) as tmp:
            save_file(state, str(tmp), metadata=metadata)


def load_head(path: str | os.PathLike, target: nn.Module | None = None, draft: nn.Module | None = None) -> WeightHead:
    """Load a head; when the pair is given, refuse a head trained for another pair."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weight head file not found: {path}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        state = load_file(str(path))
    except Exception as e:
        raise ValueError(f"weight head file {path} is not a readable safetensors file: {e}") from e
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} is not a diversed weight head "
                         f"(format {metadata.get('format')!r}, expected {FORMAT!r})")
    head = WeightHead(int(metadata["h_target"]), int(metadata["h_draft"]))
    head.load_state_dict(state)
    head.pair = json.loads(metadata["pair"])
    head.meta = json.loads(metadata.get("meta", "{}"))
    if target is not None and draft is not None:
        head.check_pair(target, draft)
    return head

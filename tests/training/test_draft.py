"""The embedded draft's recipe (diversed.training.draft) and draft vocabularies (a subset of the output head's rows)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_llama

from diversed.decoding import models
from diversed.decoding.engine import speculative_generate
from diversed.decoding.settings import Decoding, Execution, Sampling
from diversed.decoding.stepper import output_head
from diversed.training import embedded
from diversed.training.draft import Sample, distil, draft_vocabulary
from diversed.training.settings import DistillConfig, DraftRecipe

ROWS = [0, 2, 3, 5, 8, 13, 21, 34, 55, 89]


def restricted(model, rows=ROWS):
    d = copy.deepcopy(model)
    d.config.draft_vocabulary = list(rows)
    return d


@pytest.mark.parametrize("T", [1, 3])
def test_output_head_on_a_draft_vocabulary_computes_only_its_rows(T):
    lm_head = tiny_llama(0, dtype=torch.float32).lm_head
    h = torch.randn(T, lm_head.in_features)
    full, sub = output_head(lm_head)(h), output_head(lm_head, ROWS)(h)  # [T, V]
    assert sub.shape == full.shape
    torch.testing.assert_close(sub[:, ROWS], full[:, ROWS])
    others = torch.ones(full.shape[1], dtype=torch.bool)
    others[ROWS] = False
    assert torch.isneginf(sub[:, others]).all()


@pytest.mark.parametrize("fast", [True, False])
def test_a_restricted_draft_proposes_only_its_vocabulary_and_strict_stays_exact(fast):
    target = tiny_llama(0, dtype=torch.float32)
    draft = restricted(models.truncated_draft(target, 1))
    ex = Execution(fastpath=fast)
    ids = [1, 7, 9, 11]
    alone = speculative_generate(target, draft, ids,
                                 Decoding(verifier="draft", K=1, max_new_tokens=30, sampling=Sampling(1.0)),
                                 seed=0, execution=ex)
    assert set(alone.tokens) <= set(ROWS)
    ref = speculative_generate(target, None, ids, Decoding("autoregressive", max_new_tokens=30, sampling=Sampling(0)),
                               execution=ex)
    out = speculative_generate(target, draft, ids, Decoding(verifier="strict", K=4, max_new_tokens=30,
                                                            sampling=Sampling(0)), execution=ex)
    assert out.tokens == ref.tokens  # greedy strict is the target's greedy, whatever the draft can propose
    assert not set(ref.tokens) <= set(ROWS)  # ... including tokens outside the draft's vocabulary


def test_draft_vocabulary_ranks_by_frequency_then_id_and_keeps_eos():
    seqs = [Sample([1], [7, 7, 7, 4, 4, 9], None), Sample([1, 2], [9, 4, 5], None)]
    assert draft_vocabulary(seqs, 3, 20, keep={2}) == [2, 4, 7]  # 2 kept; 4 and 7 seen 3 times, 9 twice
    assert draft_vocabulary(seqs, 6, 20, keep={2}) == [0, 2, 4, 5, 7, 9]  # then 5 (once), then the lowest unseen id


def test_distil_is_deterministic_trains_the_layers_and_saves_its_vocabulary(tmp_path):
    target_dir, _ = models.prepare_tiny(tmp_path / "tiny", hidden=32)
    target, tok = models.load_model(str(target_dir)), models.load_tokenizer(str(target_dir))
    recipe = DraftRecipe(layers=1, vocab_rows=24, general_prompts=6, arith_prompts=4,
                         max_new_tokens=6, batch_size=4, epochs=2, lr=1e-2)
    a, b = (distil(target, tok, recipe, progress=False) for _ in range(2))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert torch.equal(a.model.embed_tokens.weight, target.model.embed_tokens.weight)  # frozen
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    rows = models.draft_vocabulary(a)
    assert len(rows) == 24 and rows == sorted(rows) and tok.eos_token_id in rows
    assert a.config.draft_recipe["prompts"] == 10
    a.save_pretrained(tmp_path / "draft")
    assert models.draft_vocabulary(models.load_model(str(tmp_path / "draft"))) == rows


def test_embedded_draft_names(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVERSED_RESOURCES", str(tmp_path))
    target, distilled = models.embedded_paths(2)
    _, weak = models.embedded_paths(2, "embedded-weak")
    assert target.parent == distilled.parent == weak.parent and len({target, distilled, weak}) == 3
    with pytest.raises(ValueError, match="unknown embedded draft 'embedded-strong'"):
        models.embedded_paths(2, "embedded-strong")
    with pytest.raises(FileNotFoundError, match="prepare-models --kind embedded-weak --draft-layers 1"):
        models.load_model("embedded-weak", role="draft", draft_layers=1)


def test_fine_tuning_a_restricted_draft_compares_it_over_its_vocabulary():
    from diversed.training.finetune import fit_draft, kl_loss

    target = tiny_llama(0, dtype=torch.float32)
    student = restricted(models.truncated_draft(target, 1)).train().requires_grad_(True)
    x = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        p, q = target(x).logits[0, 2:5], student(x).logits[0, 2:5]  # [3, V]: the positions predicting 4, 5, 6
    log = fit_draft(student, target, [([1, 2, 3], [4, 5, 6])], DistillConfig(epochs=1, lr=1e-3), progress=False)
    assert log[0]["kl"] == pytest.approx(kl_loss(p[:, ROWS], q[:, ROWS]).item(), rel=1e-4)
    assert log[0]["kl"] != pytest.approx(kl_loss(p, q).item(), rel=1e-2)


def test_a_changed_recipe_rebuilds_the_embedded_draft(tmp_path):
    import json

    recipe = DraftRecipe(layers=2)
    assert not embedded._built(tmp_path, recipe)
    (tmp_path / "config.json").write_text(json.dumps({"draft_recipe": {"id": recipe.id}}))
    assert embedded._built(tmp_path, recipe) and embedded._built(tmp_path, None)
    assert not embedded._built(tmp_path, DraftRecipe(layers=2, epochs=9))
    assert DraftRecipe(layers=2).id == recipe.id != DraftRecipe(layers=3).id


def test_the_draft_is_distilled_on_no_prompt_of_any_task_split():
    """Regression: the embedded draft was distilled on the built-in tasks' train prompts, the prompts the head
    trains on: on capitals it memorised the train capitals, so the head learned to follow it (w 0.2, rewards 0.5
    on train) and DIVERSED fell to 3% accuracy on eval. Its prompts are in no split of any built-in task."""
    from diversed.tasks import SPLITS, get_task

    prompts = set(DraftRecipe().prompts())
    assert len(prompts) == len(DraftRecipe().prompts()) == 384 + 160
    for name in ("arith", "capitals", "open"):
        task = get_task(name)
        for split in SPLITS:
            assert not prompts & {ex.prompt for ex in task.examples(split)}, (name, split)


def test_sft_on_a_restricted_draft_learns_only_the_tokens_it_can_propose():
    from diversed.training.finetune import sft_loss

    logits = torch.randn(3, len(ROWS), generator=torch.Generator().manual_seed(0))  # [3, R]
    tokens = torch.tensor([ROWS[4], 7, ROWS[1]])  # 7 is not in the draft's vocabulary
    expected = torch.nn.functional.cross_entropy(logits[[0, 2]], torch.tensor([4, 1]))
    assert sft_loss(logits, tokens, torch.tensor(ROWS)) == pytest.approx(expected.item(), rel=1e-6)
    full = torch.randn(2, 96)
    assert sft_loss(full, torch.tensor([5, 9])) == pytest.approx(
        torch.nn.functional.cross_entropy(full, torch.tensor([5, 9])).item(), rel=1e-6)

"""A trained model brought back in parts (experiments/blockbert_experiments/weight_parts.py): only what training changed
travels, and the folder rebuilt from the checkpoint and the parts loads as the trained model, to bf16."""

import json

import pytest
import torch
from conftest import load_script, tiny_config

from blockbert_experiments.weight_parts import export_parts, restore_parts
from blockbert_hf import BlockBertForMaskedLM


@pytest.fixture
def checkpoint_and_trained(tmp_path):
    torch.manual_seed(0)
    base = BlockBertForMaskedLM(tiny_config())
    base.save_pretrained(tmp_path / "base")
    trained = BlockBertForMaskedLM.from_pretrained(tmp_path / "base")
    with torch.no_grad():  # training that left the word embeddings (and the decoder tied to them) as they were
        for name, parameter in trained.named_parameters():
            if "word_embeddings" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.01)
    trained.config.heads_per_shift = [2, 2]  # the run's own config travels too
    trained.save_pretrained(tmp_path / "trained")
    return tmp_path / "base", tmp_path / "trained"


def test_only_the_changed_tensors_travel_and_the_rebuilt_model_is_the_trained_one(checkpoint_and_trained, tmp_path):
    base, trained = checkpoint_and_trained
    manifest = export_parts(trained, base, tmp_path / "out", "run", max_part_bytes=20_000)
    recorded = json.loads(manifest.read_text())
    assert len(recorded["parts"]) > 1  # split to the part size
    assert recorded["tensors_from_base"] == ["roberta.embeddings.word_embeddings.weight"]
    restored = restore_parts(manifest, base, tmp_path / "restored")
    assert (restored / "modeling_blockbert.py").is_file()
    assert json.loads((restored / "config.json").read_text())["heads_per_shift"] == [2, 2]
    before = BlockBertForMaskedLM.from_pretrained(base).state_dict()
    expected = BlockBertForMaskedLM.from_pretrained(trained).state_dict()
    rebuilt = BlockBertForMaskedLM.from_pretrained(restored).state_dict()
    for name, tensor in expected.items():  # unchanged tensors exactly, trained ones rounded to bf16
        unchanged = torch.equal(tensor, before[name])
        assert unchanged == ("word_embeddings" in name or name == "lm_head.decoder.weight"), name
        assert torch.equal(rebuilt[name], tensor if unchanged else tensor.to(torch.bfloat16).float()), name


def test_a_wrong_checkpoint_or_an_altered_part_is_refused_before_writing(checkpoint_and_trained, tmp_path):
    base, trained = checkpoint_and_trained
    manifest = export_parts(trained, base, tmp_path / "out", "run")
    with pytest.raises(ValueError, match="is not the checkpoint run's parts apply to"):
        restore_parts(manifest, trained, tmp_path / "restored")
    part = next((tmp_path / "out").glob("run.part-*.safetensors"))
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="missing or not the part that was written"):
        restore_parts(manifest, base, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()


def test_the_script_exports_and_restores_and_refuses_a_missing_manifest(checkpoint_and_trained, tmp_path, capsys):
    main = load_script("experiments/weight_parts.py").main
    base, trained = checkpoint_and_trained
    out = tmp_path / "out"
    args = ["--model_dir", str(trained), "--base_dir", str(base), "--output_dir", str(out), "--name", "run"]
    assert main(["export", *args]) == 0
    restore = ["--base_dir", str(base), "--output_dir", str(tmp_path / "restored")]
    assert main(["restore", "--manifest", str(out / "run.parts.json"), *restore]) == 0
    assert (tmp_path / "restored" / "model.safetensors").is_file()
    assert main(["restore", "--manifest", str(out / "other.parts.json"), *restore]) == 2
    assert "other.parts.json" in capsys.readouterr().err

"""Saved folders: save/load round trips, what a folder carries (the model's code and the QA pipeline), loading it with
the AutoClasses and without the package, folders saved by blockbert-hf 0.1, and atomic writes."""

import copy
import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import CARRIED_CODE_FILES, REPO_ROOT, make_model, random_batch, tiny_config
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForQuestionAnswering, AutoTokenizer

from blockbert_hf import (
    BlockBertConfig,
    BlockBertForMaskedLM,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
)
from blockbert_hf.saving import atomic_directory, save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config


HEAD_CLASSES = [
    BlockBertModel,
    BlockBertForMaskedLM,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
]
V01_FOLDER = REPO_ROOT / "tests" / "fixtures" / "blockbert-mlm-v0.1"
V01_EXPECTED = REPO_ROOT / "tests" / "fixtures" / "blockbert-mlm-v0.1-expected.safetensors"


def first_output(outputs) -> torch.Tensor:
    for name in ("logits", "start_logits", "last_hidden_state"):
        if getattr(outputs, name, None) is not None:
            return getattr(outputs, name)
    raise AssertionError("no output tensor")


@pytest.mark.parametrize("model_class", HEAD_CLASSES)
def test_save_load_gives_the_same_outputs(model_class, tmp_path):
    model = make_model(model_class, tiny_config())
    input_ids, attention_mask = random_batch([64, 40], 64)
    with torch.no_grad():
        before = first_output(model(input_ids, attention_mask=attention_mask))
    model.save_pretrained(tmp_path / "saved")
    reloaded = model_class.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        after = first_output(reloaded(input_ids, attention_mask=attention_mask))
    torch.testing.assert_close(before, after, atol=0, rtol=0)
    assert reloaded.config.to_json_string() == model.config.to_json_string()


def test_a_saved_folder_carries_its_code_and_keeps_weights_tied(tmp_path):
    model = BlockBertForMaskedLM(tiny_config()).eval()
    assert model.lm_head.decoder.weight.data_ptr() == model.roberta.embeddings.word_embeddings.weight.data_ptr()
    model.save_pretrained(tmp_path)
    assert CARRIED_CODE_FILES | {"model.safetensors", "config.json"} == {path.name for path in tmp_path.iterdir()}
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) >= {
        "AutoConfig",
        "AutoModel",
        "AutoModelForMaskedLM",
        "AutoModelForQuestionAnswering",
        "AutoModelForSequenceClassification",
        "AutoModelForTokenClassification",
        "AutoModelForMultipleChoice",
    }
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is BlockBertForMaskedLM
    assert loaded.lm_head.decoder.weight.data_ptr() == loaded.roberta.embeddings.word_embeddings.weight.data_ptr()


def test_trust_remote_code_without_the_package(tmp_path, tokenizer):
    """A saved folder loads with every AutoModelFor... in a process where `import blockbert_hf` fails; the model loaded
    so saves again as transformers saves (its code and QA pipeline carried, other files of the folder kept) into a
    folder that loads and still serves `pipeline("question-answering", trust_remote_code=True)`."""
    config = tiny_config(vocab_size=len(tokenizer))
    model = BlockBertForMaskedLM(config).eval()
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(tmp_path / "model", model.save_pretrained, tokenizer.save_pretrained)
    assert CARRIED_CODE_FILES <= {path.name for path in (tmp_path / "model").iterdir()}
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "notes.txt").write_text("kept")
    input_ids, attention_mask = random_batch([20, 9], 20, vocab_size=len(tokenizer))
    with torch.no_grad():
        expected = model.roberta(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.save({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import os, sys
        sys.modules["blockbert_hf"] = None  # hide the installed package
        try:
            import blockbert_hf
        except ImportError:
            pass
        else:
            raise SystemExit("blockbert_hf is importable")
        import torch
        from transformers import (AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForMultipleChoice,
            AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoModelForTokenClassification,
            AutoTokenizer, pipeline)
        folder, again = {str(tmp_path / "model")!r}, {str(tmp_path / "again")!r}
        io = torch.load({str(tmp_path / "io.pt")!r})
        base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(base).__name__ == "BlockBertModel", type(base)
        with torch.no_grad():
            out = base(io["input_ids"], attention_mask=io["attention_mask"]).last_hidden_state
        print("max_diff", (out - io["expected"]).abs().max().item())
        for auto in (AutoModelForMaskedLM, AutoModelForQuestionAnswering, AutoModelForSequenceClassification,
                     AutoModelForTokenClassification, AutoModelForMultipleChoice):
            print(type(auto.from_pretrained(folder, trust_remote_code=True)).__name__)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        print("model_max_length", tokenizer.model_max_length)

        qa_model = AutoModelForQuestionAnswering.from_pretrained(folder, trust_remote_code=True)
        qa_model.save_pretrained(again)
        print("saved_again", " ".join(sorted(os.listdir(again))))
        reloaded = AutoModel.from_pretrained(again, trust_remote_code=True).eval()
        with torch.no_grad():
            out = reloaded(io["input_ids"], attention_mask=io["attention_mask"]).last_hidden_state
        print("max_diff_again", (out - io["expected"]).abs().max().item())
        qa = pipeline("question-answering", model=again, tokenizer=folder, trust_remote_code=True)
        answer = qa(question="When was it launched?", context="The battleship was launched in 1912.")
        print("pipeline_again", type(qa).__name__, sorted(answer))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split("\n")

    def value(key: str) -> str:
        return next(line for line in lines if line.startswith(f"{key} ")).split(" ", 1)[1]

    assert float(value("max_diff")) < 1e-5 and float(value("max_diff_again")) < 1e-5
    for name in (
        "BlockBertForMaskedLM",
        "BlockBertForQuestionAnswering",
        "BlockBertForSequenceClassification",
        "BlockBertForTokenClassification",
        "BlockBertForMultipleChoice",
    ):
        assert name in lines
    assert value("model_max_length") == "64", result.stdout
    # transformers' save wrote the new folder: everything the model carries, the old file kept.
    assert set(value("saved_again").split()) == CARRIED_CODE_FILES | {"config.json", "model.safetensors", "notes.txt"}
    assert value("pipeline_again") == "ExtractiveQuestionAnsweringPipeline ['answer', 'end', 'score', 'start']"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["again", "io.pt", "model"]  # no staging left


def test_auto_classes_and_tokenizer_resolve_for_a_saved_folder(tmp_path, tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(tmp_path, BlockBertForMaskedLM(config).save_pretrained, tokenizer.save_pretrained)
    assert type(AutoModel.from_pretrained(tmp_path)) is BlockBertModel
    assert type(AutoModelForQuestionAnswering.from_pretrained(tmp_path)) is BlockBertForQuestionAnswering
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded_tokenizer.model_max_length == config.max_sequence_length == 64
    assert loaded_tokenizer("The battleship").input_ids == tokenizer("The battleship").input_ids


def test_from_pretrained_with_a_new_num_blocks_derives_the_block_size(tmp_path):
    model = make_model(BlockBertModel, tiny_config())
    model.save_pretrained(tmp_path)
    reloaded = BlockBertModel.from_pretrained(tmp_path, num_blocks=4, heads_per_shift=[1, 1, 1, 1])
    assert reloaded.config.effective_block_size == 16
    input_ids, _ = random_batch([64], 64)
    with torch.no_grad():
        captured = []
        handle = reloaded.encoder.layer[0].attention.self.register_forward_hook(
            lambda module, args, output: captured.append(output[1])
        )
        reloaded.set_attn_implementation("eager")
        reloaded(input_ids, output_attentions=True)
        handle.remove()
    assert tuple(captured[0].shape[2:]) == (4, 16, 16)  # four blocks of 16, as the config says


def test_a_folder_saved_by_v0_1_loads_with_the_same_logits():
    expected = load_file(V01_EXPECTED)
    for implementation in ("sdpa", "eager"):
        model = BlockBertForMaskedLM.from_pretrained(V01_FOLDER, attn_implementation=implementation).eval()
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
        is_real = expected["attention_mask"].bool()  # padding positions are not outputs (docs/attention.md)
        torch.testing.assert_close(logits[is_real], expected["logits"][is_real], atol=1e-5, rtol=1e-5)
    config = BlockBertConfig.from_pretrained(V01_FOLDER)  # it stores the derived block size, 16: read as unset
    assert (config.block_size, config.effective_block_size) == (None, 16)
    reloaded = BlockBertConfig.from_pretrained(V01_FOLDER, num_blocks=4, heads_per_shift=[1, 1, 1, 1])
    assert reloaded.effective_block_size == 8


# --- atomic writes ----------------------------------------------------------------------------------------------------


def test_a_save_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    import transformers.modeling_utils

    model = BlockBertModel(tiny_config())
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "tokenizer.json").write_text("{}")
    model.save_pretrained(tmp_path / "earlier")
    before = {path.name: path.read_bytes() for path in (tmp_path / "earlier").iterdir()}

    def failing_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", failing_write)
    changed = copy.deepcopy(model)
    changed.config.num_blocks, changed.config.heads_per_shift = 4, [1, 1, 1, 1]
    with pytest.raises(OSError, match="disk full"):
        changed.save_pretrained(tmp_path / "earlier")
    with pytest.raises(OSError, match="disk full"):
        changed.save_pretrained(tmp_path / "new")
    assert {path.name: path.read_bytes() for path in (tmp_path / "earlier").iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["earlier"]  # no new folder, no staging left


def test_saved_files_get_the_modes_the_umask_gives_any_new_file(tmp_path):
    umask = os.umask(0o022)
    try:
        BlockBertModel(tiny_config()).save_pretrained(tmp_path / "model")
    finally:
        os.umask(umask)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "model").iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == modes["modeling_blockbert.py"] == 0o644
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755


def test_saving_into_a_folder_keeps_other_files_and_replaces_old_weights(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model-00001-of-00002.safetensors").write_text("an earlier sharded save")
    BlockBertModel(tiny_config()).save_pretrained(tmp_path)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert "tokenizer.json" in names and "model.safetensors" in names
    assert "model-00001-of-00002.safetensors" not in names
    assert BlockBertModel.from_pretrained(tmp_path) is not None


def test_atomic_save_leaves_nothing_behind_on_failure(tmp_path):
    def broken(folder):
        (folder / "half.bin").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_atomically(tmp_path / "out", broken)
    assert list(tmp_path.iterdir()) == []


def test_atomic_save_gives_an_ordinary_folder(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    folder = save_atomically(tmp_path / "out", lambda staging: (staging / "a.txt").write_text("x"))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def _killed_write(target):
    """Runs a write to `target` in another process that is killed (SIGKILL) inside it, as an interrupted export is."""
    code = textwrap.dedent(
        f"""
        import importlib.util, os, signal, sys
        spec = importlib.util.spec_from_file_location("saving", {str(REPO_ROOT / "src/blockbert_hf/saving.py")!r})
        saving = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(saving)
        with saving.atomic_directory({str(target)!r}) as staging:
            (staging / "model.onnx").write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == -9


@pytest.mark.skipif(os.name != "posix", reason="a killed writer is recognised by its process id on POSIX systems")
def test_a_new_write_removes_what_a_killed_write_to_the_same_target_left(tmp_path):
    _killed_write(tmp_path / "out")
    _killed_write(tmp_path / "other")
    assert len([path for path in tmp_path.iterdir() if path.name.startswith(".out.tmp-")]) == 1
    save_atomically(tmp_path / "out", lambda staging: (staging / "a.txt").write_text("x"))
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names[-1] == "out" and names[0].startswith(".other.tmp-") and len(names) == 2  # only its own target's


def test_a_write_in_progress_is_not_taken_for_a_stale_one(tmp_path):
    with atomic_directory(tmp_path / "out") as first:
        save_atomically(tmp_path / "out", lambda staging: (staging / "a.txt").write_text("second"))
        assert first.is_dir()  # a live writer's staging folder stays
        (first / "a.txt").write_text("first")
    assert (tmp_path / "out" / "a.txt").read_text() == "first"
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_a_failed_final_rename_leaves_the_target_as_it_was_and_no_staging(tmp_path, monkeypatch):
    target = tmp_path / "out"
    save_atomically(target, lambda staging: (staging / "a.txt").write_text("old"))
    replace = os.replace

    def failing_replace(source, destination):
        if ".out.tmp-" in os.fspath(source):
            raise OSError("no space left on device")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="no space left"):
        save_atomically(target, lambda staging: (staging / "a.txt").write_text("new"))
    assert [path.name for path in tmp_path.iterdir()] == ["out"]
    assert (target / "a.txt").read_text() == "old"


# --- saving into an existing folder: what is kept, and a save killed half-way --------------------------------------


def _tagged_model(tag: str) -> BlockBertForMaskedLM:
    """A tiny MLM whose config carries `tag` and whose weights depend on it, to tell two saves apart on reload."""
    torch.manual_seed(len(tag) + ord(tag[0]))
    model = BlockBertForMaskedLM(tiny_config())
    model.config.save_tag = tag
    return model


def _assert_loads_as_one_save(folder, models: dict[str, BlockBertForMaskedLM]):
    """The folder loads as exactly one of `models` (its config's tag and its weights agree), or refuses to load."""
    try:
        loaded = BlockBertForMaskedLM.from_pretrained(folder)
    except (OSError, ValueError):
        return None
    tag = loaded.config.save_tag
    expected = models[tag].state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), f"config of save {tag!r} beside other weights ({name})"
    return tag


def test_saving_into_a_folder_keeps_user_files_whose_names_start_like_weight_files(tmp_path):
    user_files = {"model-eval.json": "{}", "model-card-draft.md": "draft", "model.safetensors.bak": "backup"}
    for name, text in user_files.items():
        (tmp_path / name).write_text(text)
    models = {"A": _tagged_model("A"), "Bee": _tagged_model("Bee")}
    models["A"].save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(path.name for path in tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    assert _assert_loads_as_one_save(tmp_path, models) == "A"

    models["Bee"].save_pretrained(tmp_path)  # one file replaces the shards and their index
    names = {path.name for path in tmp_path.iterdir()}
    assert not names & set(shards) and "model.safetensors.index.json" not in names
    assert _assert_loads_as_one_save(tmp_path, models) == "Bee"

    models["A"].save_pretrained(tmp_path, max_shard_size="20KB")  # shards replace the one file
    assert "model.safetensors" not in {path.name for path in tmp_path.iterdir()}
    assert _assert_loads_as_one_save(tmp_path, models) == "A"
    for name, text in user_files.items():
        assert (tmp_path / name).read_text() == text


KILLED_SAVE = """
import os, sys, tempfile
import torch
from blockbert_hf import BlockBertConfig, BlockBertForMaskedLM

folder, kill_at, parent_read_only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(len("Bee") + ord("B"))
model = BlockBertForMaskedLM(BlockBertConfig(**{config!r}))
model.config.save_tag = "Bee"
if parent_read_only:  # as for a user who may write in the folder but not beside it
    mkdtemp = tempfile.mkdtemp
    def refusing_mkdtemp(*args, dir=None, **kwargs):
        if dir is not None and os.path.samefile(dir, os.path.dirname(folder)):
            raise PermissionError(13, "Permission denied", dir)
        return mkdtemp(*args, dir=dir, **kwargs)
    tempfile.mkdtemp = refusing_mkdtemp
replace, calls = os.replace, []
def killed_replace(source, destination, **kwargs):
    calls.append(source)
    if len(calls) == kill_at:
        os._exit(3)  # as SIGKILL: no cleanup runs
    replace(source, destination, **kwargs)
os.replace = killed_replace
model.save_pretrained(folder, max_shard_size="20KB")
"""


@pytest.mark.parametrize("parent_read_only", [False, True], ids=["staging beside", "staging inside"])
@pytest.mark.parametrize("kill_at", [2, 4])
def test_a_save_killed_between_two_renames_never_leaves_a_mixed_folder_that_loads(tmp_path, kill_at, parent_read_only):
    folder = tmp_path / "model"
    models = {"A": _tagged_model("A"), "Bee": _tagged_model("Bee")}
    models["A"].save_pretrained(folder, max_shard_size="20KB")
    config = {key: value for key, value in tiny_config().to_diff_dict().items() if key != "transformers_version"}
    script = KILLED_SAVE.format(config=config)
    done = subprocess.run([sys.executable, "-c", script, str(folder), str(kill_at), str(int(parent_read_only))])
    assert done.returncode in (0, 3)
    _assert_loads_as_one_save(folder, models)


def test_saving_into_a_folder_whose_parent_is_not_writable_stages_inside_it(tmp_path, monkeypatch):
    import tempfile

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    mkdtemp = tempfile.mkdtemp

    def refusing_mkdtemp(*args, dir=None, **kwargs):
        if dir is not None and os.path.samefile(dir, tmp_path):
            raise PermissionError(13, "Permission denied", dir)
        return mkdtemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", refusing_mkdtemp)
    models = {"A": _tagged_model("A")}
    models["A"].save_pretrained(folder, max_shard_size="20KB")
    assert _assert_loads_as_one_save(folder, models) == "A"
    assert (folder / "tokenizer.json").read_text() == "{}"
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]
    assert [path.name for path in tmp_path.iterdir()] == ["model"]


def test_saving_into_the_working_directory_leaves_the_process_in_it(tmp_path, monkeypatch, tokenizer):
    """`model.save_pretrained(".")` from inside the folder, then a relative write, as users do."""
    folder = tmp_path / "model"
    folder.mkdir()
    monkeypatch.chdir(folder)
    models = {"A": _tagged_model("A")}
    models["A"].save_pretrained(".")
    assert Path(os.getcwd()) == folder
    tokenizer.save_pretrained(".")
    assert _assert_loads_as_one_save(folder, models) == "A"
    assert (folder / "tokenizer.json").is_file()
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]
    assert [path.name for path in tmp_path.iterdir()] == ["model"]


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EXDEV], ids=["EBUSY", "EXDEV"])
def test_saving_into_a_folder_the_system_will_not_rename_updates_it_in_place(tmp_path, monkeypatch, code):
    """A container volume's root (a bind mount) refuses the rename with EBUSY; the save then updates it in place."""
    folder = tmp_path / "volume"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    (folder / "notes").mkdir()
    (folder / "notes" / "a.txt").write_text("kept")
    replace = os.replace

    def refusing_replace(source, destination, **kwargs):
        if os.path.abspath(source) == str(folder):
            raise OSError(code, os.strerror(code), str(source))
        return replace(source, destination, **kwargs)

    monkeypatch.setattr(os, "replace", refusing_replace)
    models = {"A": _tagged_model("A")}
    models["A"].save_pretrained(folder, max_shard_size="20KB")
    assert _assert_loads_as_one_save(folder, models) == "A"
    assert (folder / "tokenizer.json").read_text() == "{}"
    assert (folder / "notes" / "a.txt").read_text() == "kept"
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]
    assert [path.name for path in tmp_path.iterdir()] == ["volume"]


# --- symlinked output folders ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("existing", [True, False], ids=["link to a folder", "dangling link"])
def test_saving_through_a_symlinked_folder_writes_into_its_target(tmp_path, existing):
    real, link = tmp_path / "real", tmp_path / "link"
    if existing:
        real.mkdir()
        (real / "tokenizer.json").write_text("{}")
    link.symlink_to(real, target_is_directory=True)
    models = {"A": _tagged_model("A")}
    models["A"].save_pretrained(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _assert_loads_as_one_save(real, models) == "A"
    assert (real / "tokenizer.json").is_file() == existing
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "real"]


@pytest.mark.parametrize("existing", [True, False], ids=["link to a folder", "dangling link"])
def test_a_replacing_write_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path, existing):
    """What the converter and the ONNX export do with their output folder."""
    real, link = tmp_path / "real", tmp_path / "link"
    if existing:
        real.mkdir()
        (real / "old.txt").write_text("old")
    link.symlink_to(real, target_is_directory=True)
    save_atomically(link, lambda staging: (staging / "new.txt").write_text("new"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert sorted(path.name for path in real.iterdir()) == ["new.txt"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "real"]

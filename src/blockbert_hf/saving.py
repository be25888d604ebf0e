"""Files: atomic writes (a folder or file appears complete under its final name or not at all) and reading text.

Every folder is written through `atomic_directory`: a staging folder `.NAME.tmp-XXXX` beside the target, renamed into
place when complete (with `update=True`, as the model's `save_pretrained` writes, the existing folder's other files are
hard-linked into the staging folder first, so the switch is still one rename). A symlinked target is written through:
the folder it points to is replaced, the link stays. With an `accelerator`, all processes write into the one staging
folder (e.g. each its RNG state in a checkpoint) and it is renamed once every process is done.

Staging and backup names carry their writer (`.NAME.tmp-PID@HOST-XXXX`, `.NAME.old-PID@HOST`): a new write to NAME
first removes those of its own target whose writer is gone, and `remove_stale_staging` those of a whole folder.
`check_output_keeps_inputs` refuses, before any work, an output that would replace the inputs it is made from.

What a saved model folder carries to load with `trust_remote_code=True` is named here too (`AUTO_MAP`,
`add_remote_code_fields`), and how the model publishes a complete folder to the Hub (`HubUpload`, used by
`save_pretrained(push_to_hub=True)`, and `push_model_to_hub`, the model's `push_to_hub`): weights, config, code, QA
pipeline, tokenizer and model card. The model's code imports this file, so saved model folders carry it. It imports
only the standard library and `huggingface_hub` (a dependency of transformers), and transformers by name where needed:
transformers' remote-code loader refuses a carried file that imports a package which is not installed.
"""

import copy
import errno
import glob
import gzip
import hashlib
import importlib
import inspect
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import HfApi, ModelCard, try_to_load_from_cache


logger = logging.getLogger(__name__)


# `.NAME.tmp-XXXX` (a write in progress) and `.NAME.old-XXXX` (the folder it replaces, until the rename is done).
_STAGING_NAME = re.compile(r"^\..+\.(tmp|old)-[^/]+$")
# Who writes: a staging folder is stale once this process is gone (only a writer on this machine can be checked).
_HOST = re.sub(r"[^\w.-]", "_", socket.gethostname())


class OutputOverwritesInputError(ValueError):
    """An output that is one of the inputs it is made from, or a folder holding one: writing it would replace them."""


def check_output_keeps_inputs(
    output: str | os.PathLike,
    inputs: Mapping[str, str | os.PathLike | list | tuple | None],
    *,
    output_name: str = "the output",
) -> None:
    """Refuses, before any work, an `output` that is one of `inputs` (option name -> path or list of paths) or a folder
    that holds one: writers replace their whole output, so such an input would be destroyed, with or without an
    overwrite option.

    Symlinks and relative paths are resolved; inputs that do not exist locally (None, a Hub id) are skipped. An output
    inside an input folder is allowed: a writer touches only its own output, never the folder around it."""
    target = Path(output).resolve()
    named = [(name, path) for name, paths in inputs.items() for path in _as_list(paths)]
    for name, path in named:
        if path is None or not os.path.lexists(path):
            continue
        resolved = Path(path).resolve()
        if resolved == target or target in resolved.parents:
            relation = "is" if resolved == target else "holds"
            raise OutputOverwritesInputError(
                f"{output_name} {output} {relation} {name} {path}: writing it would destroy that input; choose an "
                "output outside it."
            )


def _as_list(paths) -> list:
    return list(paths) if isinstance(paths, (list, tuple)) else [paths]


def _writer_is_gone(owner: str) -> bool:
    """Whether the writer `PID@HOST` of a staging or backup name has ended (unknown: assumed alive)."""
    pid, _, host = owner.partition("@")
    if host != _HOST or not pid.isdigit() or os.name != "posix":  # os.kill(pid, 0) ends the process on Windows
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. another user's process
        return False
    return False


def _remove_stale_writes(target: Path) -> None:
    """Removes the staging and backup folders of earlier writes to `target` whose writer is gone. A backup whose
    target is missing (the writer was killed between its two renames) is the last complete folder: it is put back."""
    if not target.parent.is_dir():
        return
    prefixes = {f".{target.name}.tmp-": True, f".{target.name}.old-": False}
    inside = list(target.iterdir()) if target.is_dir() and not target.is_symlink() else []  # an update's staging
    for path in [*target.parent.iterdir(), *inside]:
        for prefix, is_staging in prefixes.items():
            if not path.name.startswith(prefix):
                continue
            owner = path.name[len(prefix) :]
            if not _writer_is_gone(owner.rpartition("-")[0] if is_staging else owner):
                continue
            if not is_staging and not os.path.lexists(target):
                os.replace(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)


def _current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def set_default_file_mode(path: str | os.PathLike) -> None:
    """Gives the file at `path` the mode any new file gets under the current umask (writers that create files
    owner-only, such as `tempfile.mkstemp`, bypass it)."""
    os.chmod(path, 0o666 & ~_current_umask())


def _cannot_be_swapped(target: Path) -> bool:
    """Whether an existing folder must be updated where it is rather than swapped for a new one: a mount point (a
    container volume's root) cannot be renamed, and swapping the folder that holds the working directory would leave
    the process in a deleted folder (`save_pretrained(".")`)."""
    if not target.is_dir():
        return False
    try:
        working = Path(os.getcwd())
    except FileNotFoundError:
        working = None
    return os.path.ismount(target) or (working is not None and (working == target or target in working.parents))


def _create_staging(target: Path, inside_allowed: bool = False) -> tuple[Path, bool]:
    """Creates the staging folder beside `target`; returns it and whether it is inside `target` instead, which only
    an update (`inside_allowed`) of an existing folder does, where its parent may not be written or the folder cannot
    be swapped (`_cannot_be_swapped`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_writes(target)
    prefix = f".{target.name}.tmp-{os.getpid()}@{_HOST}-"
    if inside_allowed and _cannot_be_swapped(target):
        staging, inside = Path(tempfile.mkdtemp(prefix=prefix, dir=target)), True
    else:
        try:
            staging, inside = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent)), False
        except PermissionError:
            if not (inside_allowed and target.is_dir()):
                raise
            staging, inside = Path(tempfile.mkdtemp(prefix=prefix, dir=target)), True
    staging.chmod(0o777 & ~_current_umask())  # mkdtemp makes it owner-only; the result should look like any folder
    return staging, inside


def _replace_with(staging: Path, target: Path) -> None:
    """Renames `staging` to `target`; an old folder there is removed only after the new one is in place (and put back
    if the rename fails)."""
    backup = None
    if os.path.lexists(target):
        backup = target.with_name(f".{target.name}.old-{os.getpid()}@{_HOST}")
        os.replace(target, backup)
    try:
        os.replace(staging, target)
    except BaseException:
        if backup is not None:
            os.replace(backup, target)
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination, follow_symlinks=False)
    except OSError:  # another file system, a file system without hard links, or a file of another user
        shutil.copy2(source, destination, follow_symlinks=False)


def _entries_to_keep(target: Path, written: set[str], replaced: Callable[[str], bool]) -> list[Path]:
    """The entries of `target` an update keeps: those it does not write, except the files `replaced` names, the marker
    of an unfinished update and staging folders."""
    return [
        entry
        for entry in target.iterdir()
        if entry.name not in written
        and entry.name != UNFINISHED_SAVE_MARKER
        and not _STAGING_NAME.match(entry.name)
        and not (replaced(entry.name) and entry.is_file())
    ]


def _update_by_swap(staging: Path, target: Path, replaced: Callable[[str], bool]) -> None:
    """Hard-links (or copies) the entries of `target` to keep into `staging`, then swaps the folders: a kill leaves
    either folder complete, never a mix of the two."""
    written = {entry.name for entry in staging.iterdir()}
    for entry in _entries_to_keep(target, written, replaced):
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, staging / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, staging / entry.name)
    shutil.copymode(target, staging)
    try:
        _replace_with(staging, target)
    except OSError as error:
        # A folder the system refuses to rename (a mount point `_cannot_be_swapped` did not recognise, such as a bind
        # mount) or across file systems: update it in place, with the kept entries' copies dropped first.
        if error.errno not in (errno.EBUSY, errno.EXDEV):
            raise
        for entry in staging.iterdir():
            if entry.name in written:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        _update_in_place(staging, target, replaced)


def _update_in_place(staging: Path, target: Path, replaced: Callable[[str], bool]) -> None:
    """Moves every entry of `staging` (a folder inside `target`, or beside it where a swap was refused) into
    `target`, where the folder cannot be swapped. The moves are not one step: `UNFINISHED_SAVE_MARKER` stays in
    `target` until they are all done, so a folder a killed update left refuses to load (`check_save_is_complete`)."""
    marker = target / UNFINISHED_SAVE_MARKER
    write_file_atomically(marker, "A save into this folder did not finish: save again before loading it.\n")
    written = {entry.name for entry in staging.iterdir()}
    for entry in target.iterdir():
        if entry.name not in written and replaced(entry.name) and entry.is_file():
            entry.unlink()
    for name in written:
        destination = target / name
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        try:
            os.replace(staging / name, destination)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            shutil.move(staging / name, destination)  # staging on another file system: copied, then removed
    staging.rmdir()
    marker.unlink()


@contextmanager
def atomic_directory(
    path: str | os.PathLike, accelerator=None, update: bool = False, replaced: Callable[[str], bool] | None = None
):
    """Yields a temporary folder beside `path`; on success it replaces `path`, on error it is deleted and `path` is
    left as it was (also when the final rename fails). A symlink at `path` is written through: the folder it points
    to is replaced, the link stays. With an `accelerator` every process gets the same staging folder (created by the
    main process) and the rename waits until every process has left the block. What killed writes to `path` left
    beside it is removed first.

    With `update=True` an existing folder at `path` is updated instead of replaced: its other entries are kept, except
    the files whose names `replaced` accepts (what an earlier write of the same kind left, e.g. the weight files of an
    earlier save). They are hard-linked into the staging folder, which then replaces the folder in one step. Where the
    folder's parent may not be written, the folder is a mount point or holds the working directory, or the system
    refuses the swap (EBUSY, EXDEV), the staged entries are moved in one by one instead, with a marker that makes a
    folder left half-updated refuse to load (`check_save_is_complete`)."""
    target = Path(os.path.realpath(path))
    replaced = replaced or (lambda name: False)
    is_main = accelerator is None or accelerator.is_main_process
    staging, inside = _create_staging(target, inside_allowed=update) if is_main else (None, False)
    if accelerator is not None and accelerator.num_processes > 1:
        # Imported by name, not by an import statement: transformers' remote-code loader requires every package a
        # carried file names in one, and accelerate is optional.
        broadcast_object_list = importlib.import_module("accelerate.utils").broadcast_object_list
        shared = [str(staging) if staging is not None else None]
        broadcast_object_list(shared)
        staging = Path(shared[0])
    try:
        yield staging
        if accelerator is not None:
            accelerator.wait_for_everyone()
    except BaseException:
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    if is_main:
        try:
            if update and inside:
                _update_in_place(staging, target, replaced)
            elif update and target.is_dir():
                _update_by_swap(staging, target, replaced)
            else:
                _replace_with(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    if accelerator is not None:
        accelerator.wait_for_everyone()


def remove_stale_staging(folder: str | os.PathLike) -> list[Path]:
    """Deletes the staging and backup folders that killed `atomic_directory` writes left in `folder`; returns them.
    Call it where no write is in progress (e.g. before a run starts writing checkpoints)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = [path for path in folder.iterdir() if path.is_dir() and _STAGING_NAME.match(path.name)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def save_atomically(path: str | os.PathLike, *savers: Callable[[Path], object]) -> Path:
    """Calls every `saver(folder)` (e.g. `model.save_pretrained`, `tokenizer.save_pretrained`) into one atomic
    folder."""
    with atomic_directory(path) as staging:
        for saver in savers:
            saver(staging)
    return Path(path)


def write_file_atomically(path, content: str | bytes | Callable) -> None:
    """Writes `content` (text, bytes, or a function that writes to the path it is given, e.g. a figure's `savefig`)
    to a temporary file beside `path`, then renames it: `path` is either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    try:
        if callable(content):
            content(temporary)
        elif isinstance(content, bytes):
            Path(temporary).write_bytes(content)
        else:
            Path(temporary).write_text(content, encoding="utf-8")
        with open(temporary, "rb") as written:  # on disk before the rename, so a crash cannot leave an empty file
            os.fsync(written.fileno())
        set_default_file_mode(temporary)  # mkstemp creates the file private
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomically(path: str | os.PathLike, obj, indent: int | None = 2) -> Path:
    """Writes `obj` as UTF-8 JSON (ending in a newline) through `write_file_atomically`."""
    write_file_atomically(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")
    return Path(path)


def open_text(path: str | os.PathLike):
    """Opens a UTF-8 text file for reading, gunzipping `.gz` files."""
    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")


def sha256_of_file(path: str | os.PathLike) -> str:
    """The file's sha256, read in 1 MiB chunks (model weights are too large to read at once)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# What a saved model folder carries to load with `trust_remote_code=True`
# ---------------------------------------------------------------------------------------------------------------------

# Every class a saved folder can be loaded as with `trust_remote_code=True` (written to `config.auto_map`).
AUTO_MAP = {
    "AutoConfig": "configuration_blockbert.BlockBertConfig",
    "AutoModel": "modeling_blockbert.BlockBertModel",
    "AutoModelForMaskedLM": "modeling_blockbert.BlockBertForMaskedLM",
    "AutoModelForQuestionAnswering": "modeling_blockbert.BlockBertForQuestionAnswering",
    "AutoModelForSequenceClassification": "modeling_blockbert.BlockBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_blockbert.BlockBertForTokenClassification",
    "AutoModelForMultipleChoice": "modeling_blockbert.BlockBertForMultipleChoice",
}


def is_weight_file(name: str, variant: str | None = None) -> bool:
    """Whether `name` is one of the weight files transformers writes for a save (of `variant`): `model.safetensors`,
    its shards `model-00001-of-00003.safetensors` and their index, and the same for `pytorch_model.bin`. A new save
    replaces an earlier one's; any other file (`model-eval.json`, `model.safetensors.bak`) is the user's."""
    variant_part = re.escape(f".{variant}") if variant else ""
    shard = r"(-\d{5}-of-\d{5})?"
    weights = rf"(model{variant_part}{shard}\.safetensors|pytorch_model{variant_part}{shard}\.bin)"
    return re.fullmatch(rf"{weights}(\.index\.json)?", name) is not None


# Left in a folder while a save moves its files in one by one (`_update_in_place`): the folder is then incomplete.
UNFINISHED_SAVE_MARKER = ".unfinished-save"


def check_save_is_complete(folder: str | os.PathLike) -> None:
    """Raises `OSError` for a local folder that a killed save left incomplete: a folder holding
    `UNFINISHED_SAVE_MARKER`, or a missing folder whose previous version waits beside it (killed between the two
    renames of its swap; the next write to it puts that version back)."""
    if not isinstance(folder, (str, os.PathLike)):
        return
    target = Path(os.path.realpath(folder))
    if (target / UNFINISHED_SAVE_MARKER).is_file():
        raise OSError(
            f"{folder} is incomplete: a save into it was interrupted while moving its files in, so it may mix two "
            "saves. Save the model into it again (or delete it) before loading it."
        )
    if not os.path.lexists(target) and target.parent.is_dir():
        backups = sorted(target.parent.glob(f".{glob.escape(target.name)}.old-*"))
        if backups:
            raise OSError(
                f"{folder} is missing: a save into it was interrupted between swapping folders; its previous version "
                f"is {backups[0]} (the next save to {folder} puts it back first, or rename it yourself)."
            )


# transformers 5 has no built-in "question-answering" pipeline: every saved folder carries ours (a code file beside
# the model's, found by `pipeline("question-answering", model=folder, trust_remote_code=True)`).
QA_PIPELINE_FILE = "pipeline_question_answering.py"
CUSTOM_PIPELINES = {
    "question-answering": {
        "impl": "pipeline_question_answering.ExtractiveQuestionAnsweringPipeline",
        "pt": ["AutoModelForQuestionAnswering"],
        "type": "text",
    }
}


def find_qa_pipeline_file(config) -> str | None:
    """Where the QA pipeline's source is: beside this file (the installed package), else in the folder or Hub repo
    the model was loaded from (trust_remote_code copies only the modeling files into its module cache)."""
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), QA_PIPELINE_FILE)
    if os.path.isfile(beside):
        return beside
    source = getattr(config, "_name_or_path", None) or getattr(config, "name_or_path", None)
    if not source:
        return None
    if os.path.isdir(source):
        candidate = os.path.join(source, QA_PIPELINE_FILE)
        return candidate if os.path.isfile(candidate) else None
    try:
        cached = try_to_load_from_cache(source, QA_PIPELINE_FILE)
    except Exception:  # not a Hub repo id: nothing cached
        return None
    return cached if isinstance(cached, str) and os.path.isfile(cached) else None


def add_remote_code_fields(config) -> str | None:
    """Writes into a model's `config` what its saved folder needs to load with `trust_remote_code=True`: `auto_map`
    naming every BlockBERT head, and `custom_pipelines` naming the QA pipeline where its file is found. Returns that
    file, to be copied beside the weights, or None (a pipeline entry of an earlier save is then dropped, with a
    warning: the folder would not carry its code)."""
    config.auto_map = {**(getattr(config, "auto_map", None) or {}), **AUTO_MAP}
    custom_pipelines = dict(getattr(config, "custom_pipelines", None) or {})
    pipeline_file = find_qa_pipeline_file(config)
    if pipeline_file is not None:
        # A copy: transformers' pipeline() turns the "pt" names of a config's entry into classes in place.
        custom_pipelines.update(copy.deepcopy(CUSTOM_PIPELINES))
    elif custom_pipelines.pop("question-answering", None) is not None:
        logger.warning(
            f"{QA_PIPELINE_FILE} was not found beside the model code nor in {config._name_or_path!r}: the saved "
            "folder will not carry the question-answering pipeline."
        )
    if custom_pipelines or getattr(config, "custom_pipelines", None):
        config.custom_pipelines = custom_pipelines
    return pipeline_file


# ---------------------------------------------------------------------------------------------------------------------
# Publishing a saved model folder to the Hub
# ---------------------------------------------------------------------------------------------------------------------

CARD_FILE = "README.md"
# transformers writes it with every tokenizer it saves: a folder holding it holds a tokenizer.
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


@dataclass
class HubUpload:
    """Where and how a saved model folder goes to the Hub: the repository (created with `repo_options`, e.g.
    `private=True`, if missing), the branch `revision` (created if missing) or a pull request, and the commit's
    message. The folder is uploaded as it is with `HfApi.upload_folder` (one commit for a model folder: it splits only
    hundreds of files), hidden entries aside (the staging folders of a write in progress)."""

    repo_id: str
    token: str | bool | None = None
    commit_message: str | None = None
    commit_description: str | None = None
    revision: str | None = None
    create_pr: bool = False
    repo_options: dict = field(default_factory=dict)

    @classmethod
    def from_save_kwargs(cls, kwargs: dict, default_repo_id: str, save: Callable) -> "HubUpload":
        """Takes out of the keywords of `save_pretrained(folder, push_to_hub=True, ...)` what transformers sends to the
        Hub: `repo_id` (default: the folder's name), `token`, `commit_message`, `create_pr`, and every keyword that is
        not a parameter of the `save` function (those of `create_repo`, such as `private`)."""
        save_parameters = inspect.signature(save).parameters
        hub = {name: kwargs.pop(name) for name in list(kwargs) if name == "token" or name not in save_parameters}
        fields = {name: hub.pop(name) for name in ("repo_id", "token", "commit_message", "create_pr") if name in hub}
        return cls(**{"repo_id": default_repo_id, **fields}, repo_options=hub)

    def create_repo(self) -> None:
        """Creates the repository (and branch) if missing, before any work: a bad id or login fails first."""
        api = HfApi()
        self.repo_id = api.create_repo(self.repo_id, token=self.token, exist_ok=True, **self.repo_options).repo_id
        if self.revision is not None and not self.create_pr and not self.revision.startswith("refs/pr"):
            api.create_branch(self.repo_id, branch=self.revision, token=self.token, exist_ok=True)

    def write_card(self, folder: str | os.PathLike, existing: str | os.PathLike, tags: list[str] | None = None) -> None:
        """Gives `folder` the card to publish, keeping the model's own: the card of the folder `existing` (`folder`
        itself, or the one the model was loaded from); without one, the card transformers' `push_to_hub` gives (the
        repository's card on the Hub, or transformers' template). The model's `tags` are added, as transformers does;
        without tags the card's bytes are kept."""
        own, card_file = Path(existing) / CARD_FILE, Path(folder) / CARD_FILE
        if own.is_file() and not tags:
            if own.resolve() != card_file.resolve():
                shutil.copyfile(own, card_file)
            return
        if own.is_file():
            card = ModelCard.load(own)
            card.data.tags = list(dict.fromkeys([*(card.data.tags or []), *tags]))
        else:
            # By name: transformers is not a package this carried file may import (see the module's docstring).
            hub_utils = importlib.import_module("transformers.utils.hub")
            card = hub_utils.create_and_tag_model_card(self.repo_id, tags, token=self.token)
        card.save(card_file)

    def upload(self, folder: str | os.PathLike):
        """Uploads `folder` as it is; returns the commit's `CommitInfo`."""
        commit = HfApi().upload_folder(
            repo_id=self.repo_id, folder_path=str(folder), repo_type="model", ignore_patterns=[".*"],
            commit_message=self.commit_message or "Upload model", commit_description=self.commit_description,
            token=self.token, revision=self.revision, create_pr=self.create_pr,
        )  # fmt: skip
        logger.info(f"Uploaded {folder} to the Hub repository {self.repo_id}.")
        return commit


def save_source_tokenizer(model, folder: str | os.PathLike, repo_id: str) -> bool:
    """Saves into `folder` the tokenizer of the local folder `model` was loaded from, where it holds one (a model does
    not own its tokenizer; this is the one it was saved with). Otherwise warns how to publish one and returns False."""
    source = getattr(model.config, "_name_or_path", None) or ""
    if os.path.isfile(os.path.join(source, TOKENIZER_CONFIG_FILE)):
        auto_tokenizer = importlib.import_module("transformers").AutoTokenizer  # by name, as in `write_card`
        auto_tokenizer.from_pretrained(source).save_pretrained(folder)
        return True
    if os.path.isdir(source):
        reason = f"{source}, the folder the model was loaded from, holds none"
    else:
        reason = "the model was not loaded from a local folder holding one"
    logger.warning(
        f"push_to_hub uploads no tokenizer: {reason}. Publish the tokenizer with "
        f"tokenizer.push_to_hub({repo_id!r}) (with the same revision), as in transformers."
    )
    return False


def push_model_to_hub(
    model,
    repo_id: str,
    *,
    commit_message: str | None = None,
    commit_description: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: int | str | None = "50GB",
    tags: list[str] | None = None,
):
    """`model.push_to_hub(repo_id)` with transformers' arguments, uploading one complete folder: what
    `model.save_pretrained` writes (weights, config, code, QA pipeline), plus the tokenizer and card of the local folder
    the model was loaded from (`save_source_tokenizer`; `HubUpload.write_card`: else the repository's card on the Hub
    or transformers' template). The model's `model_tags` and `tags` go into the card."""
    upload = HubUpload(
        repo_id, token=token, commit_message=commit_message, commit_description=commit_description,
        revision=revision, create_pr=create_pr, repo_options={"private": private},
    )  # fmt: skip
    upload.create_repo()
    tags = list(dict.fromkeys([*(model.model_tags or []), *([tags] if isinstance(tags, str) else tags or [])]))
    source = getattr(model.config, "_name_or_path", None) or ""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, max_shard_size=max_shard_size)
        save_source_tokenizer(model, folder, upload.repo_id)
        upload.write_card(folder, existing=source if os.path.isdir(source) else folder, tags=tags)
        return upload.upload(folder)

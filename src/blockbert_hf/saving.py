"""Files: atomic writes (a folder or file appears complete under its final name or not at all) and reading text.

Every folder is written through `atomic_directory`: a staging folder `.NAME.tmp-XXXX` beside the target, renamed into
place when complete (with `update=True`, as the model's `save_pretrained` writes, the existing folder's other files are
hard-linked into the staging folder first, so the switch is still one rename). A symlinked target is written through:
the folder it points to is replaced, the link stays. With an `accelerator`, all processes write into the one staging
folder (e.g. each its RNG state in a checkpoint) and it is renamed once every process is done.

Staging and backup names carry their writer (`.NAME.tmp-PID@HOST-XXXX`, `.NAME.old-PID@HOST`): a new write to NAME
first removes those of its own target whose writer is gone, and `remove_stale_staging` those of a whole folder.
`check_output_keeps_inputs` refuses, before any work, an output that would replace the inputs it is made from.

The BlockBERT classes get their saving guarantees here, when `blockbert_hf` is imported (`add_save_guarantees`):
`save_pretrained` writes through `atomic_directory`, `from_pretrained` refuses a folder a killed save left incomplete,
and publishing uploads one complete folder (`HubUpload`, used by `save_pretrained(push_to_hub=True)`, and
`push_model_to_hub`, the model's `push_to_hub`): weights, config, code, QA pipeline, tokenizer and model card. None of
this is in the code a saved folder carries, which is the model alone (docs/publishing.md).
"""

import errno
import functools
import glob
import gzip
import hashlib
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

from huggingface_hub import HfApi, ModelCard
from transformers import AutoTokenizer
from transformers.utils.hub import create_and_tag_model_card


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
        from accelerate.utils import broadcast_object_list  # here: accelerate is optional (the train extra)

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


def save_tokenizer(tokenizer, folder: str | os.PathLike) -> None:
    """`tokenizer.save_pretrained(folder)` without the truncation and padding of its last call: transformers leaves
    them in a fast tokenizer's backend, and `tokenizer.json` would apply them to every input read with `tokenizers`
    (e.g. beside an ONNX file) or any runtime other than transformers, which sets them again on each call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # None for a tokenizer without a `tokenizers` backend
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    tokenizer.save_pretrained(folder)


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
# The model's save, load and publishing guarantees where the package is installed
# ---------------------------------------------------------------------------------------------------------------------


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
            card = create_and_tag_model_card(self.repo_id, tags, token=self.token)
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
        save_tokenizer(AutoTokenizer.from_pretrained(source), folder)
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


def _save_pretrained_atomically(plain_save: Callable) -> Callable:
    """`plain_save` (the class's own `save_pretrained`) writing through `atomic_directory`, with `push_to_hub=True`
    uploading the complete folder."""

    @functools.wraps(plain_save)
    def save_pretrained(self, save_directory, *args, **kwargs):
        if not kwargs.get("is_main_process", True):
            return plain_save(self, save_directory, *args, **kwargs)
        target = os.path.abspath(save_directory)
        if os.path.isfile(target):
            raise ValueError(f"save_pretrained needs a folder, but {save_directory!r} is a file.")
        hub_upload = None
        if kwargs.pop("push_to_hub", False):  # the complete folder is uploaded below, not the staging folder
            hub_upload = HubUpload.from_save_kwargs(kwargs, os.path.basename(target), plain_save)
            hub_upload.create_repo()
        # transformers removes an earlier save's weight shards from the folder it writes to, which here is the staging
        # folder: `replaced` does that for the real one (and also drops an earlier save's single weight file or index,
        # which transformers keeps, and which would then load instead of the new shards).
        variant = kwargs.get("variant")
        with atomic_directory(target, update=True, replaced=lambda name: is_weight_file(name, variant)) as staging:
            result = plain_save(self, staging, *args, **kwargs)
            for weights in staging.glob("*.safetensors"):
                # safetensors >= 0.8 writes its files owner-only whatever the umask (safetensors/safetensors#782).
                set_default_file_mode(weights)
            if hub_upload is not None:
                hub_upload.write_card(staging, existing=target, tags=self.model_tags)
        if hub_upload is not None:
            hub_upload.upload(target)
        return result

    save_pretrained.__doc__ = """Saves weights, config and the model's code (with its QA pipeline) as transformers does,
        so the folder loads with any `AutoModelFor...` and `trust_remote_code=True` where `blockbert_hf` is not
        installed.

        Everything is written to a staging folder first and switched with `save_directory` in one step once complete,
        so a save that fails or is killed half-way leaves `save_directory` as it was. Files already there that this
        save does not write (a tokenizer saved earlier, say) are kept; the weight files of an earlier save
        (`model.safetensors`, its shards and index) are replaced. A symlinked `save_directory` is written through.
        Where the folder cannot be switched (its parent may not be written, it is a mount point or the working
        directory, as in `save_pretrained(".")`), the files are moved in one by one, and a folder left half-written by
        a killed save refuses to load (`from_pretrained`) until saved again.

        With `push_to_hub=True` (and transformers' `repo_id`, `private`, `commit_message`, `create_pr`, `token`), the
        folder as it is once saved, a tokenizer saved there before included, is uploaded in one commit. Its model card
        is kept; a folder without one gets the card transformers gives (the repository's own, or its template).
        """
    return save_pretrained


def _from_pretrained_checked(plain_load: Callable) -> classmethod:
    """`plain_load` (the function of a `from_pretrained` classmethod), refusing a folder a killed save left incomplete
    (which would otherwise load with whatever files it holds)."""

    @functools.wraps(plain_load)
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        check_save_is_complete(pretrained_model_name_or_path)
        return plain_load(cls, pretrained_model_name_or_path, *args, **kwargs)

    return classmethod(from_pretrained)


def _push_to_hub(self, repo_id: str, **kwargs):
    """Uploads the model to the Hub repository `repo_id` in one commit, with transformers' arguments (`private`,
    `revision`, `create_pr`, `commit_message`, `token`, `tags`, ...): what `save_pretrained` writes, with the
    tokenizer and model card of the local folder the model was loaded from (without a card there, the one
    transformers gives: the repository's own, or its template). A model not loaded from a folder holding a
    tokenizer is uploaded without one, with a warning: push the tokenizer with `tokenizer.push_to_hub(repo_id)`.
    """
    return push_model_to_hub(self, repo_id, **kwargs)


def add_save_guarantees(model_class: type) -> None:
    """Gives `model_class` (and its subclasses) the installed package's `save_pretrained`, `from_pretrained` and
    `push_to_hub`. They are added here, not defined in the model's file, because that file is what a saved folder
    carries for `trust_remote_code`, and code that renames and deletes folders or uploads has no place there."""
    if getattr(model_class, "_blockbert_save_guarantees", False):
        return
    model_class.save_pretrained = _save_pretrained_atomically(model_class.save_pretrained)
    model_class.from_pretrained = _from_pretrained_checked(model_class.from_pretrained.__func__)
    model_class.push_to_hub = _push_to_hub
    model_class._blockbert_save_guarantees = True

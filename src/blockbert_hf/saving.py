"""Files: atomic writes (a folder or file appears complete under its final name or not at all) and reading text.

Every folder is written through `atomic_directory`: a staging folder `.NAME.tmp-XXXX` beside the target, renamed into
place when complete (with `update=True`, as the model's `save_pretrained` writes, its entries are moved into an
existing folder one by one, so the folder's other files stay). With an `accelerator`, all processes write into the one
staging folder (e.g. each its RNG state in a checkpoint) and it is renamed once every process is done.

Staging and backup names carry their writer (`.NAME.tmp-PID@HOST-XXXX`, `.NAME.old-PID@HOST`): a new write to NAME
first removes those of its own target whose writer is gone, and `remove_stale_staging` those of a whole folder.
`check_output_keeps_inputs` refuses, before any work, an output that would replace the inputs it is made from.

The model's code imports this file, so saved model folders carry it (`trust_remote_code`): it imports only the
standard library at module level.
"""

import gzip
import hashlib
import importlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path


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
    for path in target.parent.iterdir():
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


def _create_staging(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_writes(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}@{_HOST}-", dir=target.parent))
    staging.chmod(0o777 & ~_current_umask())  # mkdtemp makes it owner-only; the result should look like any folder
    return staging


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


def _move_into(staging: Path, target: Path, replaced_prefixes: tuple[str, ...]) -> None:
    """Moves every entry of `staging` into the existing folder `target` (each rename atomic), first removing the files
    of `target` that this write did not produce and whose names start with one of `replaced_prefixes`."""
    written = {entry.name for entry in staging.iterdir()}
    for entry in target.iterdir():
        if entry.name not in written and entry.name.startswith(replaced_prefixes) and entry.is_file():
            entry.unlink()
    for name in written:
        destination = target / name
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        os.replace(staging / name, destination)
    staging.rmdir()


@contextmanager
def atomic_directory(
    path: str | os.PathLike, accelerator=None, update: bool = False, replaced_prefixes: tuple[str, ...] = ()
):
    """Yields a temporary folder beside `path`; on success it replaces `path`, on error it is deleted and `path` is
    left as it was (also when the final rename fails). With an `accelerator` every process gets the same staging
    folder (created by the main process) and the rename waits until every process has left the block. What killed
    writes to `path` left beside it is removed first.

    With `update=True` an existing folder at `path` is updated instead of replaced: each entry written is moved into
    it, and its other files are kept, except those whose names start with one of `replaced_prefixes` (what an earlier
    write of the same kind left, e.g. the weight shards of an earlier save)."""
    target = Path(path)
    is_main = accelerator is None or accelerator.is_main_process
    staging = _create_staging(target) if is_main else None
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
            if update and target.is_dir():
                _move_into(staging, target, replaced_prefixes)
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

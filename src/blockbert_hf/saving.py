"""Files: atomic writes (a folder or file appears complete under its final name or not at all) and reading text."""

import gzip
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(path: str | os.PathLike):
    """Yields a temporary folder beside `path`; on success it replaces `path` (an old folder there is removed only
    after the new one is in place), on error it is deleted and `path` is left as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it owner-only; the result should look like any folder
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    backup = None
    if target.exists():
        backup = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, backup)
    os.replace(staging, target)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


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
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates the file private; give it the usual permissions
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def open_text(path: str | os.PathLike):
    """Opens a UTF-8 text file for reading, gunzipping `.gz` files."""
    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")

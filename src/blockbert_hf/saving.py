"""Atomic writes: a folder appears complete under its final name or not at all."""

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
    """Calls every `saver(folder)` (e.g. `model.save_pretrained`, `tokenizer.save_pretrained`) into one atomic folder."""
    with atomic_directory(path) as staging:
        for saver in savers:
            saver(staging)
    return Path(path)

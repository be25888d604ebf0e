"""transformers' own common model tests (`tests/test_modeling_common.py`), taken from the source distribution of the
installed transformers version: model repositories run them so that a change breaking transformers' contract fails.

The file is fetched from the package registry the first time (`pip download --no-binary :all:`, which honours the
user's pip configuration), extracted into a cache folder (`BLOCKBERT_TRANSFORMERS_TESTS_CACHE`, default
`~/.cache/blockbert-hf`) and imported from there; it is never copied into this repository. Without the registry the
tests skip with the reason, except under `CI=true`, where they fail: CI must not pass without running them.
"""

import importlib
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import pytest
import transformers


PACKAGE = "transformers_upstream_tests"  # the fetched files, as a package apart from this module
# The files of the source distribution's `tests/` that the common model tests need.
NEEDED_FILES = ("test_modeling_common.py",)
# The source distribution leaves out `tests/exporters/` and `tests/generation/`, whose mixins the common module
# imports: each is an empty class here (BlockBERT generates nothing; its export is tested in tests/library).
STUB_MIXINS = {
    "exporters.test_export": "ExportTesterMixin",
    "generation.test_utils": "GenerationTesterMixin",
}


def cache_folder() -> Path:
    root = os.environ.get("BLOCKBERT_TRANSFORMERS_TESTS_CACHE") or Path.home() / ".cache" / "blockbert-hf"
    return Path(root) / f"transformers-{transformers.__version__}-tests"


def _fetch(folder: Path) -> None:
    """Downloads the installed version's source distribution and extracts `NEEDED_FILES` into `folder`, which
    appears complete or not at all."""
    version = transformers.__version__
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable, "-m", "pip", "download", f"transformers=={version}", "--no-deps", "--no-binary", ":all:",
            "--dest", scratch, "--quiet",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        archives = list(Path(scratch).glob("transformers-*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise OSError(f"pip download of transformers=={version}'s source failed: {done.stderr.strip()[-500:]}")
        staging = Path(scratch) / "package"
        staging.mkdir()
        with tarfile.open(archives[0]) as archive:
            for name in NEEDED_FILES:
                member = archive.extractfile(f"{archives[0].name.removesuffix('.tar.gz')}/tests/{name}")
                (staging / name).write_bytes(member.read())
        (staging / "__init__.py").write_text("")
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / NEEDED_FILES[0]).is_file():  # another process may have finished first
                raise


def _import_package(folder: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    for module_name, class_name in STUB_MIXINS.items():
        parent_name, _ = module_name.split(".")
        for name in (f"{PACKAGE}.{parent_name}", f"{PACKAGE}.{module_name}"):
            sys.modules.setdefault(name, types.ModuleType(name))
        setattr(sys.modules[f"{PACKAGE}.{module_name}"], class_name, type(class_name, (), {}))
    return importlib.import_module(f"{PACKAGE}.test_modeling_common")


def common_test_module() -> types.ModuleType:
    """transformers' `test_modeling_common` module, fetched if need be; skips the calling test module when the
    registry cannot be reached (fails instead under `CI=true`)."""
    folder = cache_folder()
    try:
        if not all((folder / name).is_file() for name in NEEDED_FILES):
            _fetch(folder)
        return _import_package(folder)
    except (OSError, subprocess.SubprocessError, ImportError, KeyError) as error:
        reason = f"transformers' common model tests are unavailable ({type(error).__name__}: {error})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason}; under CI=true they must run.", pytrace=False)
        pytest.skip(f"{reason}: they need the package registry once, to fetch the source.", allow_module_level=True)

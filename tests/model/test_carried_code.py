"""The code a saved folder carries is the model alone (docs/publishing.md, "What a saved folder carries"): the files
listed there are the files `save_pretrained` writes, and their syntax trees import and call nothing beyond what runs
a model (no file writes, processes, sockets or uploads)."""

import ast
import importlib.metadata
import re
import sys

from conftest import CARRIED_CODE_FILES, REPO_ROOT, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering


MODEL_FOLDER = REPO_ROOT / "src" / "blockbert_hf" / "model"
# Pure standard-library modules, and the packages transformers itself requires.
ALLOWED_MODULES = {
    "abc", "bisect", "collections", "copy", "dataclasses", "enum", "functools", "itertools", "math", "numbers",
    "operator", "re", "typing", "warnings",
    "torch", "transformers", "huggingface_hub", "numpy", "regex", "safetensors", "tokenizers",
}  # fmt: skip
# Built-ins that open files or run code given as text.
FORBIDDEN_BUILTINS = {"open", "exec", "eval", "compile", "__import__"}
# Calls that write or delete files, run or signal processes, or reach the network, whatever object they are made on.
FORBIDDEN_CALLS = {
    "kill", "system", "popen", "remove", "unlink", "rmtree", "rename",
    "makedirs", "mkdir", "rmdir", "chmod", "copyfile", "copy2", "copytree", "move", "write_text", "write_bytes",
    "upload_file", "upload_folder", "create_repo", "create_branch", "push_to_hub", "save_file", "urlopen",
}  # fmt: skip


def absolute_imports(source: str) -> set[str]:
    """The top-level packages `source` imports by absolute imports."""
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    return imported


def violations(source: str, siblings: set[str]) -> list[str]:
    """What in `source` the carried code may not do: an import outside `ALLOWED_MODULES`, a relative import of a file
    that is not one of `siblings` (module names), a call of `FORBIDDEN_BUILTINS` or named in `FORBIDDEN_CALLS`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names if alias.name.split(".")[0] not in ALLOWED_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module.split(".")[0] not in ALLOWED_MODULES:
                found.append(f"from {node.module} import")
            elif node.level > 0 and (node.level > 1 or (node.module or "") not in siblings):
                found.append(f"from {'.' * node.level}{node.module or ''} import")
        elif isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id in FORBIDDEN_BUILTINS | FORBIDDEN_CALLS:
                found.append(f"call {function.id}()")
            elif isinstance(function, ast.Attribute) and function.attr in FORBIDDEN_CALLS:
                found.append(f"call {function.attr}()")
    return found


def test_the_carried_files_are_those_the_docs_list_and_those_a_save_writes(tmp_path):
    page = (REPO_ROOT / "docs" / "publishing.md").read_text()
    section = page.split("## What a saved folder carries", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([\w.]+\.py)` \|", section, flags=re.M))
    BlockBertForQuestionAnswering(tiny_config()).save_pretrained(tmp_path)
    saved = {path.name for path in tmp_path.glob("*.py")}
    in_the_package = {path.name for path in MODEL_FOLDER.glob("*.py")} - {"__init__.py"}
    assert listed == saved == in_the_package == CARRIED_CODE_FILES


def test_the_carried_code_imports_and_calls_only_what_runs_a_model():
    siblings = {name.removesuffix(".py") for name in CARRIED_CODE_FILES}
    for name in sorted(CARRIED_CODE_FILES):
        assert violations((MODEL_FOLDER / name).read_text(), siblings) == [], name


def test_the_packages_the_carried_code_imports_are_torch_transformers_and_what_transformers_requires():
    """A folder loaded with `trust_remote_code` must run where only torch and transformers are installed."""
    imported = set().union(*(absolute_imports((MODEL_FOLDER / name).read_text()) for name in CARRIED_CODE_FILES))
    requirements = importlib.metadata.requires("transformers")
    required = {
        re.split(r"[ <>=!~;\[]", line)[0].lower().replace("-", "_") for line in requirements if "extra ==" not in line
    }
    assert imported - sys.stdlib_module_names - {"torch", "transformers"} <= required
    assert imported - sys.stdlib_module_names >= {"torch", "transformers", "numpy", "regex"}


def test_the_check_finds_file_process_and_network_code():
    source = """
import shutil
import os.path
from subprocess import run
from huggingface_hub import HfApi
from ..saving import atomic_directory
from .configuration_blockbert import BlockBertConfig

def save(folder):
    os.kill(1, 9)
    open(folder, "w")
    HfApi().upload_folder(folder_path=folder)
    Path(folder).write_text("x")
"""
    assert violations(source, {"configuration_blockbert"}) == [
        "import shutil",
        "import os.path",
        "from subprocess import",
        "from ..saving import",
        "call kill()",
        "call open()",
        "call upload_folder()",
        "call write_text()",
    ]

"""Bringing a trained model back from a machine whose files do not outlive it, in parts small enough to travel.

A model adapted from a converted checkpoint differs from it only in the tensors training changed: with the word
embeddings frozen, about half of all-MiniLM-L6-v2. `export_parts` writes those tensors, in bf16, as safetensors files
of at most `max_part_bytes` each, and a manifest naming the checkpoint they apply to (the sha256 of its weights file)
and the model's config. `restore_parts` rebuilds the whole model folder from the parts and that checkpoint, which the
converter makes again, byte for byte, from the same source model: only what training changed has to travel.
"""

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from blockbert_hf.saving import atomic_directory, sha256_of_file


WEIGHTS_FILE = "model.safetensors"
MANIFEST_SUFFIX = ".parts.json"
DEFAULT_PART_BYTES = 15 * 2**20  # under the 16 MiB a file may have to come back from a device machine
# The small files of a model folder that are its run's own; the others (code, tokenizer) are the checkpoint's.
RUN_FILES = ("config.json", "generation_config.json", "README.md")
# The checkpoint's files that describe the checkpoint itself, not a model trained from it.
BASE_ONLY_FILES = (WEIGHTS_FILE, "README.md", "conversion_report.json")


def changed_tensors(model: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]) -> list[str]:
    """The names of `model`'s tensors that `base` lacks or holds with another shape, dtype or value."""
    return [
        name
        for name, tensor in model.items()
        if name not in base
        or base[name].shape != tensor.shape
        or base[name].dtype != tensor.dtype
        or not torch.equal(base[name], tensor)
    ]


def _split(tensors: Mapping[str, torch.Tensor], max_part_bytes: int) -> list[dict[str, torch.Tensor]]:
    parts, size = [{}], 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > max_part_bytes:
            raise ValueError(f"{name} takes {nbytes:,} bytes, more than a part may ({max_part_bytes:,}).")
        if size + nbytes > max_part_bytes and parts[-1]:
            parts.append({})
            size = 0
        parts[-1][name] = tensor
        size += nbytes
    return parts


def export_parts(
    model_dir: str | Path,
    base_dir: str | Path,
    output_dir: str | Path,
    name: str,
    max_part_bytes: int = DEFAULT_PART_BYTES,
) -> Path:
    """Writes `output_dir/NAME.part-KK.safetensors` (the tensors of `model_dir` that differ from `base_dir`'s, floats
    in bf16) and `output_dir/NAME.parts.json`; returns the manifest's path."""
    model_dir, base_dir, output_dir = Path(model_dir), Path(base_dir), Path(output_dir)
    model, base = load_file(model_dir / WEIGHTS_FILE), load_file(base_dir / WEIGHTS_FILE)
    changed = {
        tensor_name: (
            model[tensor_name].to(torch.bfloat16) if model[tensor_name].is_floating_point() else model[tensor_name]
        )
        for tensor_name in changed_tensors(model, base)
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    part_files = []
    for index, part in enumerate(_split(changed, max_part_bytes)):
        part_file = f"{name}.part-{index:02d}.safetensors"
        save_file({key: tensor.contiguous() for key, tensor in part.items()}, output_dir / part_file)
        part_files.append(part_file)
    manifest = {
        "name": name,
        "base_weights_sha256": sha256_of_file(base_dir / WEIGHTS_FILE),
        "parts": {part_file: sha256_of_file(output_dir / part_file) for part_file in part_files},
        "changed_tensors": len(changed),
        "tensors_from_base": sorted(set(model) - set(changed)),
        "dtypes": {tensor_name: str(tensor.dtype).removeprefix("torch.") for tensor_name, tensor in model.items()},
        "files": {file: (model_dir / file).read_text() for file in RUN_FILES if (model_dir / file).is_file()},
    }
    manifest_path = output_dir / f"{name}{MANIFEST_SUFFIX}"
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest_path


def restore_parts(manifest: str | Path, base_dir: str | Path, output_dir: str | Path) -> Path:
    """Rebuilds the model folder `export_parts` described: the base folder's files, the run's config, and its weights
    (the base's unchanged tensors and the parts', back in each tensor's own dtype). Refuses a base whose weights are
    not the ones the parts were taken from, and a part that is missing or altered, before writing anything."""
    manifest_path, base_dir = Path(manifest), Path(base_dir)
    manifest = json.loads(manifest_path.read_text())
    if sha256_of_file(base_dir / WEIGHTS_FILE) != manifest["base_weights_sha256"]:
        raise ValueError(
            f"{base_dir / WEIGHTS_FILE} is not the checkpoint {manifest['name']}'s parts apply to (its sha256 "
            "differs): convert the same source model with the same options again."
        )
    for part_file, sha256 in manifest["parts"].items():
        part = manifest_path.parent / part_file
        if not part.is_file() or sha256_of_file(part) != sha256:
            raise ValueError(f"{part} is missing or not the part that was written: bring it back again.")
    base = load_file(base_dir / WEIGHTS_FILE)
    tensors = {name: base[name] for name in manifest["tensors_from_base"]}
    for part_file in manifest["parts"]:
        tensors.update(load_file(manifest_path.parent / part_file))
    tensors = {name: tensors[name].to(getattr(torch, manifest["dtypes"][name])) for name in manifest["dtypes"]}
    with atomic_directory(output_dir) as staging:
        for path in base_dir.iterdir():
            if path.is_file() and path.name not in BASE_ONLY_FILES:
                shutil.copy2(path, staging / path.name)
        for file, text in manifest["files"].items():
            (staging / file).write_text(text)
        save_file(tensors, staging / WEIGHTS_FILE, metadata={"format": "pt"})
    return Path(output_dir)

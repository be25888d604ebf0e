"""Optional dependencies: `import blockbert_hf` needs only what `install_requires` lists; the training library
(`blockbert_hf.training`, `.pretraining`, `.qa`) needs the `train` extra, and says so when it is missing."""

import importlib


TRAIN_EXTRA = ("accelerate", "datasets", "evaluate")


def require_extra(module: str, extra: str, packages: tuple[str, ...]) -> None:
    """Raises an ImportError naming `extra` when one of `packages` cannot be imported (before `module` fails on it)."""
    missing = []
    for package in packages:
        try:
            importlib.import_module(package)
        except ImportError:
            missing.append(package)
    if missing:
        raise ImportError(
            f"{module} needs {', '.join(missing)}, which blockbert-hf installs only with its {extra!r} extra: "
            f"pip install 'blockbert-hf[{extra}]'"
        )

"""The training library, behind the `train` extra (`pip install 'blockbert-hf[train]'`): run folders, checkpoints
and the scripts' shared options (`runs`), question-answering fine-tuning with task distillation (`qa`),
self-distillation (`distillation`), masked-LM pre-training (`pretraining`), and model cards (`model_card`, `hub`).

`import blockbert_hf` needs only what `install_requires` lists. The modules that need the extra's packages say so when
one is missing (`require_extra`); model cards need none of them, so conversion writes its card without the extra."""

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

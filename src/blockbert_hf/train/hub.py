"""What the scripts know of the Hugging Face Hub without asking it: the datasets they name by short names, and whether
a name is a Hub repository id rather than a local path."""

import os

from huggingface_hub.utils import HFValidationError, validate_repo_id


# `--dataset_name` short names and the Hub datasets they stand for (as a model card records them).
HUB_DATASETS = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2", "mrqa": "mrqa-workshop/mrqa"}


def is_hub_id(name_or_path: str | None) -> bool:
    """Whether a name is a Hub repository id rather than a local file or folder. As in transformers'
    `TrainingSummary`: what is not a local path, and is a valid repository id."""
    if not name_or_path or os.path.exists(name_or_path):
        return False
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        return False
    return True

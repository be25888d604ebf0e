"""The parts of modeling_blockbert.py marked `# Copied from transformers.models.roberta.modeling_roberta.X with
Roberta->BlockBert` are still RoBERTa's code in the installed transformers, so that a fix there is noticed here. A part
that differs from RoBERTa's carries no marker (a comment says what differs)."""

import inspect
import re
import textwrap

import pytest
from transformers.models.roberta import modeling_roberta

from blockbert_hf import modeling_blockbert


COPY_MARKER = re.compile(
    r"^[ ]*# Copied from transformers\.models\.roberta\.modeling_roberta\.(?P<source>[\w.]+) with Roberta->BlockBert"
    r"(?:  # noqa: E501)?\n[ ]*(?:class|def) (?P<name>\w+)",
    re.MULTILINE,
)
MARKED = {
    "RobertaSelfOutput",
    "RobertaIntermediate",
    "RobertaOutput",
    "RobertaPooler",
    "RobertaLMHead",
    "RobertaClassificationHead",
    "RobertaForSequenceClassification",
    "RobertaPreTrainedModel._init_weights",
}


def marked_copies() -> dict[str, str]:
    """RoBERTa's dotted name of every marked copy -> BlockBERT's dotted name."""
    found = {}
    for match in COPY_MARKER.finditer(inspect.getsource(modeling_blockbert)):
        ours = match["source"].replace("Roberta", "BlockBert")
        assert ours.rsplit(".", 1)[-1] == match["name"], f"the marker names {match['source']} above {match['name']}"
        found[match["source"]] = ours
    return found


def code_from_definition(module, dotted_name: str) -> str:
    """The object's source from its `class`/`def` line on (without decorators and the marker), dedented."""
    obj = module
    for part in dotted_name.split("."):
        obj = getattr(obj, part)
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(("class ", "def ")))
    return "".join(lines[start:])


def test_every_copy_is_marked():
    assert set(marked_copies()) == MARKED


@pytest.mark.parametrize("roberta_name", sorted(MARKED))
def test_marked_copies_equal_robertas_code(roberta_name):
    ours = marked_copies()[roberta_name]
    expected = code_from_definition(modeling_roberta, roberta_name).replace("Roberta", "BlockBert")
    assert code_from_definition(modeling_blockbert, ours) == expected, (
        f"{ours} is no longer transformers' {roberta_name} with Roberta->BlockBert: take RoBERTa's change, or remove "
        "the marker if BlockBERT's version must differ."
    )

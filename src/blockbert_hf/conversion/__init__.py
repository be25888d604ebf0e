"""RoBERTa / BERT checkpoints -> BlockBERT (`examples/convert_roberta_to_blockbert.py`).

1. **The source** (`source`): the source's config and architecture (RoBERTa or BERT, with or without MLM head), its
   own tokenizer, and the BlockBERT config built from it with the blockwise fields asked for.
2. **The weights** (`weights`): `convert_checkpoint` builds the matching BlockBERT model and copies the weights tensor
   for tensor: every source tensor must land in exactly one target tensor and every target tensor must receive one,
   otherwise a `ConversionError` lists the keys left over. A longer sequence length `N` fills the new position rows by
   repeating the source's trained rows; with block-relative positions the table is kept as it is and `N = n * b`.
3. **Verification** (`verification`): `verify_conversion` runs source and target on real text, tokenized by the
   source's own tokenizer.
4. **Report and saving** (`report`): `conversion_summary` / `format_report` say what was converted and how it
   verified; `check_output_dir` refuses an output folder that is or holds an input, or cannot be written, before any
   work; `save_converted` writes model, tokenizer and `conversion_report.json` atomically.

Errors (`errors`): `ConversionError` for a checkpoint or option that cannot be converted, `TokenizerError` for a source
without a usable tokenizer of its own.
"""

from .errors import ConversionError, TokenizerError
from .report import REPORT_FILE, check_output_dir, conversion_summary, format_report, save_converted
from .source import (
    SOURCE_ARCHITECTURES,
    blockbert_config_from_source,
    load_source_config,
    load_source_tokenizer,
    resolve_source_architecture,
    source_sequence_length,
)
from .verification import (
    VERIFICATION_TOLERANCE,
    TextCoverage,
    VerificationCheck,
    check_tokenizer_on_text,
    measure_text_coverage,
    sample_sentences,
    verify_conversion,
    with_blockwise_fields,
)
from .weights import ConvertedCheckpoint, convert_checkpoint, extend_position_embeddings, map_source_key


__all__ = [
    "REPORT_FILE",
    "SOURCE_ARCHITECTURES",
    "VERIFICATION_TOLERANCE",
    "ConversionError",
    "ConvertedCheckpoint",
    "TextCoverage",
    "TokenizerError",
    "VerificationCheck",
    "blockbert_config_from_source",
    "check_output_dir",
    "check_tokenizer_on_text",
    "conversion_summary",
    "convert_checkpoint",
    "extend_position_embeddings",
    "format_report",
    "load_source_config",
    "load_source_tokenizer",
    "map_source_key",
    "measure_text_coverage",
    "resolve_source_architecture",
    "sample_sentences",
    "save_converted",
    "source_sequence_length",
    "verify_conversion",
    "with_blockwise_fields",
]

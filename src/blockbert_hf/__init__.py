"""BlockBERT for Hugging Face Transformers.

Importing the package registers BlockBERT with the AutoClasses (`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`,
`AutoModelForQuestionAnswering`, `AutoModelForSequenceClassification`, `AutoModelForTokenClassification`,
`AutoModelForMultipleChoice`, `AutoTokenizer`).
"""

import transformers
from transformers import AutoConfig, AutoTokenizer

# The model's modules stay importable as before the package had folders: `from blockbert_hf import modeling_blockbert`.
from .model import (  # noqa: F401
    attention_blockbert,
    configuration_blockbert,
    modeling_blockbert,
    pipeline_question_answering,
)
from .model.configuration_blockbert import BlockBertConfig, default_heads_per_shift, parse_heads_per_shift
from .model.modeling_blockbert import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
    BlockBertPreTrainedModel,
    blockwise_attention,
    blockwise_attentions_to_dense,
    partner_block,
    sparse_fixed_pattern,
)
from .model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from .saving import add_save_guarantees
from .tokenization import BlockBertTokenizer


__version__ = "0.2.0"

# Atomic saves, checked loads and complete uploads: the installed package's, not in the code a saved folder carries.
add_save_guarantees(BlockBertPreTrainedModel)
AutoConfig.register(BlockBertConfig.model_type, BlockBertConfig, exist_ok=True)
for _auto_class, _target in modeling_blockbert.AUTO_MAP.items():
    if _auto_class != "AutoConfig":
        getattr(transformers, _auto_class).register(
            BlockBertConfig, getattr(modeling_blockbert, _target.split(".")[1]), exist_ok=True
        )
# A saved tokenizer names its own class; this covers a bare RoBERTa vocabulary and refuses a folder without one.
AutoTokenizer.register(BlockBertConfig, tokenizer_class=BlockBertTokenizer, exist_ok=True)

__all__ = [
    "BlockBertConfig",
    "BlockBertForMaskedLM",
    "BlockBertForMultipleChoice",
    "BlockBertForQuestionAnswering",
    "BlockBertForSequenceClassification",
    "BlockBertForTokenClassification",
    "BlockBertModel",
    "BlockBertPreTrainedModel",
    "BlockBertTokenizer",
    "ExtractiveQuestionAnsweringPipeline",
    "blockwise_attention",
    "blockwise_attentions_to_dense",
    "default_heads_per_shift",
    "parse_heads_per_shift",
    "partner_block",
    "sparse_fixed_pattern",
]

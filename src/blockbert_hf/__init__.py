"""BlockBERT for Hugging Face Transformers.

Importing the package registers BlockBERT with the AutoClasses (`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`,
`AutoModelForQuestionAnswering`, `AutoModelForSequenceClassification`, `AutoModelForTokenClassification`,
`AutoModelForMultipleChoice`, `AutoTokenizer`).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    RobertaTokenizer,
)

from .pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from .configuration_blockbert import BlockBertConfig, default_heads_per_shift, parse_heads_per_shift
from .modeling_blockbert import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
    BlockBertPreTrainedModel,
    blockwise_attentions_to_dense,
    partner_block,
    sparse_fixed_pattern,
)


__version__ = "0.1.0"

AutoConfig.register(BlockBertConfig.model_type, BlockBertConfig, exist_ok=True)
for _auto_class, _model_class in (
    (AutoModel, BlockBertModel),
    (AutoModelForMaskedLM, BlockBertForMaskedLM),
    (AutoModelForQuestionAnswering, BlockBertForQuestionAnswering),
    (AutoModelForSequenceClassification, BlockBertForSequenceClassification),
    (AutoModelForTokenClassification, BlockBertForTokenClassification),
    (AutoModelForMultipleChoice, BlockBertForMultipleChoice),
):
    _auto_class.register(BlockBertConfig, _model_class, exist_ok=True)
# A saved tokenizer names its own class; this covers folders whose tokenizer_config.json does not.
AutoTokenizer.register(BlockBertConfig, fast_tokenizer_class=RobertaTokenizer, exist_ok=True)

__all__ = [
    "BlockBertConfig",
    "BlockBertForMaskedLM",
    "BlockBertForMultipleChoice",
    "BlockBertForQuestionAnswering",
    "BlockBertForSequenceClassification",
    "BlockBertForTokenClassification",
    "BlockBertModel",
    "BlockBertPreTrainedModel",
    "ExtractiveQuestionAnsweringPipeline",
    "blockwise_attentions_to_dense",
    "default_heads_per_shift",
    "parse_heads_per_shift",
    "partner_block",
    "sparse_fixed_pattern",
]

"""transformers' common model tests (`ModelTesterMixin`, from the installed version's own test suite) run against
every BlockBERT head, with a tester modelled on transformers' `RobertaModelTester`.

Where this tester differs from RoBERTa's, a comment says why. The common module is fetched from the package registry
and cached (`transformers_common_tests.py`); offline the module skips, under `CI=true` it fails.
"""

import unittest
from unittest import mock

import torch
from parameterized import parameterized
from transformers.models.auto import modeling_auto
from transformers.testing_utils import torch_device
from transformers_common_tests import common_test_module

from blockbert_hf import (
    BlockBertConfig,
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
)


common = common_test_module()


def right_padded_mask(batch_size: int, seq_length: int) -> torch.Tensor:
    """Rows of 1s then 0s, of random lengths from 1 to `seq_length`. RoBERTa's tester draws every position at random;
    BlockBERT refuses padding before a real token (docs/attention.md, "Padding"), as RoBERTa's positions assume."""
    lengths = common.ids_tensor([batch_size], seq_length) + 1
    return (torch.arange(seq_length)[None, :] < lengths[:, None]).long()


class BlockBertModelTester:
    def __init__(self, parent, batch_size=13, seq_length=12, num_labels=3, num_choices=4):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = True
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.type_vocab_size = 16
        self.type_sequence_label_size = 2
        self.num_labels = num_labels
        self.num_choices = num_choices
        self.num_blocks = 2

    def get_config(self):
        # RoBERTa's tester has 512 positions; 14 give N = 12 = seq_length, so that with n = 2 blocks of 6 tokens every
        # input spans both blocks and the shift-1 head (heads_per_shift [3, 1]) reads the other block.
        return BlockBertConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=37,
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            max_position_embeddings=self.seq_length + 2,
            type_vocab_size=self.type_vocab_size,
            initializer_range=0.02,
            num_blocks=self.num_blocks,
        )

    def prepare_config_and_inputs(self):
        # Never the padding id (1), as from a tokenizer: RoBERTa's positions skip tokens of that id, which
        # `inputs_embeds` cannot see, so RoBERTa too differs between the two where RoBERTa's tester draws one.
        input_ids = common.ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 2) + 2
        input_mask = right_padded_mask(self.batch_size, self.seq_length)
        token_type_ids = common.ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        sequence_labels = common.ids_tensor([self.batch_size], self.type_sequence_label_size)
        # Labels at every position, padding included, as RoBERTa's tester (and `labels = input_ids.clone()`) gives.
        token_labels = common.ids_tensor([self.batch_size, self.seq_length], self.num_labels)
        choice_labels = common.ids_tensor([self.batch_size], self.num_choices)
        return self.get_config(), input_ids, token_type_ids, input_mask, sequence_labels, token_labels, choice_labels

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, token_type_ids, input_mask, *_ = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": input_mask}


# The mixin finds a class's task (its labels, multiple-choice inputs, which classes train) by name in transformers' auto
# mappings, which list transformers' own models only; BlockBERT's heads are added there for these tests.
TASK_MAPPINGS = {
    "MODEL_MAPPING_NAMES": BlockBertModel,
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": BlockBertForMaskedLM,
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": BlockBertForSequenceClassification,
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": BlockBertForTokenClassification,
    "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES": BlockBertForMultipleChoice,
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": BlockBertForQuestionAnswering,
}


class BlockBertModelTest(common.ModelTesterMixin, unittest.TestCase):
    # RoBERTa's list less RobertaForCausalLM: BlockBERT is an encoder only (its attention is not causal).
    all_model_classes = (
        BlockBertForMaskedLM,
        BlockBertModel,
        BlockBertForSequenceClassification,
        BlockBertForTokenClassification,
        BlockBertForMultipleChoice,
        BlockBertForQuestionAnswering,
    )
    model_split_percents = [0.5, 0.8, 0.9]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for mapping, model_class in TASK_MAPPINGS.items():
            patch = mock.patch.dict(getattr(modeling_auto, mapping), {BlockBertConfig.model_type: model_class.__name__})
            patch.start()
            cls.addClassCleanup(patch.stop)

    def setUp(self):
        self.model_tester = BlockBertModelTester(self)

    def test_attention_outputs(self):
        # With n > 1 the weights are per block, (batch, heads, blocks, b, b) (docs/attention.md); the mixin checks
        # RoBERTa's (batch, heads, L, L), which n = 1 returns.
        self.model_tester.num_blocks = 1
        super().test_attention_outputs()

    @parameterized.expand(common.TEST_EAGER_MATCHES_SDPA_INFERENCE_PARAMETERIZATION)
    def test_eager_matches_sdpa_inference(
        self, name, dtype, padding_side, use_attention_mask, output_attentions, enable_kernels
    ):
        if padding_side == "left":
            self.skipTest("BlockBERT takes right padding only (docs/attention.md, 'Padding'); left padding raises")
        common._test_eager_matches_sdpa_inference(
            self, name, dtype, padding_side, use_attention_mask, output_attentions, enable_kernels
        )

    def _check_head(self, model_class, **inputs):
        config, input_ids, token_type_ids, input_mask, sequence_labels, token_labels, choice_labels = (
            self.model_tester.prepare_config_and_inputs()
        )
        if model_class in (BlockBertForSequenceClassification, BlockBertForTokenClassification):
            config.num_labels = self.model_tester.num_labels
        model = model_class(config).to(torch_device).eval()
        labels = {"tokens": token_labels, "sequence": sequence_labels, "choice": choice_labels}
        arguments = {"input_ids": input_ids, "attention_mask": input_mask, "token_type_ids": token_type_ids}
        if model_class is BlockBertForMultipleChoice:
            choices = self.model_tester.num_choices
            arguments = {name: value[:, None].expand(-1, choices, -1).contiguous() for name, value in arguments.items()}
        for name, label_kind in inputs.items():
            arguments[name] = labels[label_kind]
        result = model(**arguments)
        if any(name in inputs for name in ("labels", "start_positions")):
            self.assertTrue(torch.isfinite(result.loss))
        return result

    def test_model(self):
        result = self._check_head(BlockBertModel)
        tester = self.model_tester
        self.assertEqual(result.last_hidden_state.shape, (tester.batch_size, tester.seq_length, tester.hidden_size))
        self.assertEqual(result.pooler_output.shape, (tester.batch_size, tester.hidden_size))

    def test_for_masked_lm(self):
        result = self._check_head(BlockBertForMaskedLM, labels="tokens")
        tester = self.model_tester
        self.assertEqual(result.logits.shape, (tester.batch_size, tester.seq_length, tester.vocab_size))

    def test_for_token_classification(self):
        result = self._check_head(BlockBertForTokenClassification, labels="tokens")
        tester = self.model_tester
        self.assertEqual(result.logits.shape, (tester.batch_size, tester.seq_length, tester.num_labels))

    def test_for_multiple_choice(self):
        result = self._check_head(BlockBertForMultipleChoice, labels="choice")
        self.assertEqual(result.logits.shape, (self.model_tester.batch_size, self.model_tester.num_choices))

    def test_for_question_answering(self):
        result = self._check_head(BlockBertForQuestionAnswering, start_positions="sequence", end_positions="sequence")
        self.assertEqual(result.start_logits.shape, (self.model_tester.batch_size, self.model_tester.seq_length))

    def test_for_sequence_classification(self):
        result = self._check_head(BlockBertForSequenceClassification, labels="sequence")  # labels < num_labels
        self.assertEqual(result.logits.shape, (self.model_tester.batch_size, self.model_tester.num_labels))

"""Window layouts for extractive QA: `"question_prefixed_blocks"` windows (every block the tokenizer's own pair input
around the question and a chunk of the context) with a byte-level (RoBERTa) and a WordPiece (BERT) tokenizer, the
unchanged `"question_first"` windows, the pipeline answering from prefixed windows, `run_qa --window_layout` and the
ONNX export's verification inputs."""

import collections
import json
import re

import numpy as np
import pytest
from conftest import REPO_ROOT, SAMPLE_TEXT, planted_qa_model, tiny_config
from transformers import AutoConfig, AutoModelForQuestionAnswering, BertTokenizer, RobertaConfig

from blockbert_hf import BlockBertForQuestionAnswering, pipeline_question_answering
from blockbert_hf.model.pipeline_question_answering import (
    ExtractiveQuestionAnsweringPipeline,
    WindowLogits,
    best_window_spans,
    model_window_layout,
    resolve_window_layout,
)
from blockbert_hf.model.question_answering_windows import context_offsets, pair_template, tokenize_windows
from blockbert_hf.onnx.export import VERIFICATION_QUESTION, VERIFICATION_TEXT, verification_batches
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines, train_roberta_tokenizer
from blockbert_hf.train.qa import (
    QARunConfig,
    check_question_lengths,
    default_window_layout,
    finetuning,
    prepare_train_features,
    read_squad_json,
    run_qa,
)


PREFIXED = "question_prefixed_blocks"
LINES = read_text_lines(SAMPLE_TEXT)
CONTEXT = " ".join(LINES[:12])
QUESTION = "  Who played the lead role in the play?"
SQUAD_V1 = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
START_WORD, END_WORD = " Naktong", " perimeter"  # single tokens of the fixture tokenizer


@pytest.fixture(scope="module")
def bert_tokenizer():
    """A BERT WordPiece tokenizer (token types 0 for the question, 1 for the context) over the sample's words."""
    words = collections.Counter(word for line in LINES for word in re.findall(r"\w+|[^\w\s]", line.lower()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [word for word, _ in words.most_common(600)]
    return BertTokenizer(vocab={word: index for index, word in enumerate(vocab)}, model_max_length=64)


@pytest.fixture(params=["roberta", "bert"])
def any_tokenizer(request, tokenizer, bert_tokenizer):
    return tokenizer if request.param == "roberta" else bert_tokenizer


def pair_parts(tokenizer, question: str):
    """`(before, after)`: the tokens and token types the tokenizer puts before and after the context of a pair."""
    encoded = tokenizer(question.lstrip(), "some text", return_token_type_ids=True)
    sequence_ids = encoded.sequence_ids()
    first = sequence_ids.index(1)
    last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
    ids, types = encoded["input_ids"], encoded["token_type_ids"]
    context_type = types[first]
    return (ids[:first], types[:first]), (ids[last + 1 :], types[last + 1 :]), context_type


def context_encoding(tokenizer, context: str):
    encoded = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return encoded["input_ids"], [tuple(span) for span in encoded["offset_mapping"]]


# ---------------------------------------------------------------------------------------------------------------------
# The windows
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_seq_len", [128, 120])  # 4 full blocks; 3 full blocks and a shorter one
def test_every_block_is_the_tokenizers_pair_input_around_the_question(any_tokenizer, max_seq_len):
    b = 32
    windows = tokenize_windows(any_tokenizer, [QUESTION], [CONTEXT], max_seq_len, 8, layout=PREFIXED, block_size=b)
    (before, before_types), (after, after_types), context_type = pair_parts(any_tokenizer, QUESTION)
    assert before[0] == any_tokenizer.cls_token_id and after[-1] == any_tokenizer.sep_token_id
    assert ("token_type_ids" in windows) == ("token_type_ids" in any_tokenizer.model_input_names)
    assert len(windows["input_ids"]) > 3
    for index, input_ids in enumerate(windows["input_ids"]):
        is_last_window = index == len(windows["input_ids"]) - 1
        assert len(input_ids) <= max_seq_len and (is_last_window or len(input_ids) == max_seq_len)
        assert windows["attention_mask"][index] == [1] * len(input_ids)
        assert windows["null_index"][index] == 0 and windows["sample_index"][index] == 0
        offsets = windows["offsets"][index]
        types = windows.get("token_type_ids", [None] * len(windows["input_ids"]))[index]
        blocks = range(0, len(input_ids), b)
        assert windows["block_null_indices"][index] == list(blocks)  # each block's own CLS scores "no answer" there
        for start in blocks:
            block, block_offsets = input_ids[start : start + b], offsets[start : start + b]
            if start != blocks[-1]:
                assert len(block) == b  # every block but the window's last is full
            assert block[: len(before)] == before and block[len(block) - len(after) :] == after
            chunk_offsets = block_offsets[len(before) : len(block) - len(after)]
            assert chunk_offsets and all(span is not None for span in chunk_offsets)
            assert all(span is None for span in block_offsets[: len(before)] + block_offsets[len(block) - len(after) :])
            if types is not None:
                block_types = types[start : start + b]
                assert block_types[: len(before)] == before_types
                assert block_types[len(block) - len(after) :] == after_types
                assert set(block_types[len(before) : len(block) - len(after)]) == {context_type}


def test_context_chunks_are_consecutive_and_windows_overlap_by_doc_stride(any_tokenizer):
    b, max_seq_len, doc_stride = 32, 96, 12
    contexts = [CONTEXT, LINES[20], " ".join(LINES[30:36])]
    windows = tokenize_windows(
        any_tokenizer, [QUESTION] * 3, contexts, max_seq_len, doc_stride, layout=PREFIXED, block_size=b
    )
    question_tokens = len(any_tokenizer(QUESTION.lstrip(), add_special_tokens=False)["input_ids"])
    capacity = 3 * (b - question_tokens - pair_template(any_tokenizer).num_special_tokens)
    for sample, context in enumerate(contexts):
        ids, offsets = context_encoding(any_tokenizer, context)
        spans = []  # (first, end) of every window's context tokens in the whole context's tokens
        for index in (i for i, s in enumerate(windows["sample_index"]) if s == sample):
            window_offsets = windows["offsets"][index]
            chunk = [(token, span) for token, span in zip(windows["input_ids"][index], window_offsets) if span]
            first = offsets.index(chunk[0][1])
            assert chunk == list(zip(ids, offsets))[first : first + len(chunk)]  # consecutive context tokens
            spans.append((first, first + len(chunk)))
        assert spans[0][0] == 0 and spans[-1][1] == len(ids)  # every context token is in some window
        for (_, end), (next_first, _) in zip(spans, spans[1:]):
            assert end - next_first == doc_stride
        assert all(end - first == capacity for first, end in spans[:-1]) and spans[-1][1] - spans[-1][0] <= capacity
    assert len(set(windows["sample_index"])) == 3 and windows["sample_index"] == sorted(windows["sample_index"])


def test_the_question_first_layout_is_the_tokenizers_overflow(any_tokenizer):
    # Two questions share a context: it is tokenized once for both.
    questions, contexts = [QUESTION, "When?", " Who wrote the sentences?"], [CONTEXT, LINES[40], CONTEXT]
    encoded = any_tokenizer(
        [q.lstrip() for q in questions],
        contexts,
        truncation="only_second",
        max_length=64,
        stride=16,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    for kwargs in ({}, {"layout": "question_first"}, {"layout": "question_first", "block_size": 32}):
        windows = tokenize_windows(any_tokenizer, questions, contexts, 64, 16, **kwargs)
        assert windows["input_ids"] == encoded["input_ids"]
        assert windows["sample_index"] == encoded["overflow_to_sample_mapping"]
        assert windows["offsets"] == [
            context_offsets(offsets, encoded.sequence_ids(i)) for i, offsets in enumerate(encoded["offset_mapping"])
        ]
        assert windows["block_null_indices"] == [[null_index] for null_index in windows["null_index"]]


def test_questions_too_long_for_a_block_and_bad_layouts_get_clear_errors(tokenizer):
    long_question = " ".join(["Which battleship"] * 8)
    with pytest.raises(
        ValueError, match=r"Question 'long' of the data leaves room for only 0 context tokens in a block"
    ):
        tokenize_windows(
            tokenizer, ["Who?", long_question], [CONTEXT] * 2, 64, 8, ["short", "long"], PREFIXED, block_size=32
        )
    with pytest.raises(ValueError, match="Shorten the question or use larger blocks"):
        check_question_lengths(["long"], [long_question], tokenizer, 64, 8, layout=PREFIXED, block_size=32)
    tokenize_windows(tokenizer, [long_question], [CONTEXT], 64, 8, layout="question_first")  # fits without blocks
    with pytest.raises(ValueError, match=r"which must exceed doc_stride = 60"):  # 2 blocks of 32 - 4 - question
        tokenize_windows(tokenizer, ["Who played it?"], [CONTEXT], 64, 60, layout=PREFIXED, block_size=32)
    with pytest.raises(ValueError, match="needs block_size"):
        tokenize_windows(tokenizer, ["Who?"], [CONTEXT], 64, 8, layout=PREFIXED)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        tokenize_windows(tokenizer, ["Who?"], [CONTEXT], 64, 8, layout=PREFIXED, block_size=0)
    with pytest.raises(ValueError, match="window_layout='blocks' is unknown"):
        tokenize_windows(tokenizer, ["Who?"], [CONTEXT], 64, 8, layout="blocks")


def test_training_labels_of_prefixed_windows_cover_the_answers(tokenizer):
    examples = read_squad_json(SQUAD_V1).select(range(12)).to_dict()
    kwargs = {"tokenizer": tokenizer, "max_seq_length": 128, "doc_stride": 8, "layout": PREFIXED, "block_size": 64}
    features = prepare_train_features(examples, **kwargs)
    windows = tokenize_windows(
        tokenizer, examples["question"], examples["context"], 128, 8, layout=PREFIXED, block_size=64
    )
    assert features["input_ids"] == windows["input_ids"]
    found = set()
    for index, (start, end) in enumerate(zip(features["start_positions"], features["end_positions"])):
        if start == end == 0:
            continue
        sample = windows["sample_index"][index]
        offsets = windows["offsets"][index]
        assert offsets[start] is not None and offsets[end] is not None
        labelled = examples["context"][sample][offsets[start][0] : offsets[end][1]]
        assert examples["answers"][sample]["text"][0] in labelled
        found.add(sample)
    assert found == set(range(12))  # every answer is labelled in some window


def test_a_span_may_cross_a_block_boundary_and_counts_only_context_tokens():
    offsets = [None, (0, 5), (6, 10), None, None, None, (11, 16), None]  # CLS alpha beta | SEP CLS question | gamma
    start, end = np.full(8, -9.0), np.full(8, -9.0)
    start[2], end[6] = 5.0, 5.0
    spans = best_window_spans(WindowLogits(start, end, offsets), max_answer_len=2, n_best=1)
    assert spans == [(10.0, 6, 16)]


# ---------------------------------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------------------------------


def planted_model(tokenizer):
    """A planted QA model (`planted_qa_model`: its start logit is large only on the start marker, its end logit only on
    the end marker) with b = 32, N = 64 and block-relative positions."""
    markers = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))[0] for word in (START_WORD, END_WORD)]
    return planted_qa_model(tokenizer, markers, block_relative_positions=True, block_size=32)


def test_the_pipeline_answers_from_prefixed_windows_never_from_the_repeated_question(tokenizer, monkeypatch):
    model = planted_model(tokenizer)
    assert model_window_layout(model.config) == ("question_first", None)
    model.config.question_answering = {"window_layout": PREFIXED}
    assert model_window_layout(model.config) == (PREFIXED, 32)
    layouts = []
    original = pipeline_question_answering.tokenize_windows

    def recording(*args, **kwargs):
        layouts.append((kwargs["layout"], kwargs["block_size"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline_question_answering, "tokenize_windows", recording)
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    lines = [line for line in LINES if "Naktong" not in line and "perimeter" not in line]
    lengths = np.cumsum([len(ids) for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]])
    filler = " ".join(lines[: int(np.searchsorted(lengths, 20 * 64)) + 1])
    cut = filler.rfind(" ", 0, int(0.7 * len(filler)))
    planted = f"{START_WORD.strip()} is a river and its{END_WORD}"
    context = f"{filler[:cut]} {planted}{filler[cut:]}"
    assert len(tokenizer(context, verbose=False)["input_ids"]) > 20 * 64
    question = f"Is{START_WORD} at the{END_WORD}?"  # the markers in the question are never answers
    answer = qa(question=question, context=context)
    start = context.index(planted)
    assert (answer["answer"], answer["start"], answer["end"]) == (planted, start, start + len(planted))
    assert layouts[-1] == (PREFIXED, 32)
    assert qa(question=question, context=context, window_layout="question_first")["answer"] == planted
    assert layouts[-1] == ("question_first", None)
    with pytest.raises(ValueError, match="window_layout='blocks' is unknown"):
        qa(question=question, context=context, window_layout="blocks")
    with pytest.raises(ValueError, match="window_layout='blocks' is unknown"):
        ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, window_layout="blocks")


def test_the_block_size_of_a_model_without_blocks_must_be_recorded():
    config = RobertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
    assert resolve_window_layout(config) == ("question_first", None)
    with pytest.raises(ValueError, match="records no block size"):
        resolve_window_layout(config, PREFIXED)
    config.question_answering = {"window_layout": PREFIXED, "block_size": 128}
    assert model_window_layout(config) == (PREFIXED, 128)


# ---------------------------------------------------------------------------------------------------------------------
# run_qa and the export
# ---------------------------------------------------------------------------------------------------------------------


def test_run_qa_trains_and_evaluates_on_prefixed_windows_and_saves_the_layout(tmp_path, monkeypatch):
    """A tiny BlockBERT with block-relative positions (n = 2, b = 64, N = 128): one training step, evaluation on 4
    questions. Without --window_layout, such a model's windows of N tokens are question-prefixed by default."""
    contexts = sorted(set(read_squad_json(SQUAD_V1)["context"]))
    tokenizer = train_roberta_tokenizer(contexts, vocab_size=600, model_max_length=128)
    config = tiny_config(vocab_size=len(tokenizer), block_relative_positions=True, max_position_embeddings=66)
    assert (config.effective_block_size, config.max_sequence_length) == (64, 128)
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(tmp_path / "tiny", BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained)
    run_config = QARunConfig(
        model_name_or_path=str(tmp_path / "tiny"), output_dir=str(tmp_path / "run"), train_file=str(SQUAD_V1),
        validation_file=str(SQUAD_V1), do_train=True, do_eval=True, max_train_steps=1, max_train_samples=8,
        max_eval_samples=4, per_device_train_batch_size=8, per_device_eval_batch_size=8, doc_stride=16,
    )  # fmt: skip
    summary = run_qa(run_config)
    assert summary["window_layout"] == PREFIXED and summary["window_block_size"] == 64
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["question_answering"] == {
        "window_scoring": "null_relative",
        "qa_objective": "window",
        "window_layout": PREFIXED,
        "block_size": 64,
    }
    assert model_window_layout(AutoConfig.from_pretrained(tmp_path / "run" / "model")) == (PREFIXED, 64)
    examples = read_squad_json(SQUAD_V1).select(range(4))
    windows = tokenize_windows(
        tokenizer, examples["question"], examples["context"], 128, 16, layout=PREFIXED, block_size=64
    )
    assert summary["eval_features"] == len(windows["input_ids"])  # the evaluation's windows are prefixed
    predictions = json.loads((tmp_path / "run" / "eval_predictions.json").read_text())
    assert all(predictions[row["id"]] in row["context"] for row in examples)
    # The evaluation answers as the saved model's pipeline does, on the same prefixed windows.
    model = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "run" / "model").eval()
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    pairs = [{"question": row["question"], "context": row["context"]} for row in examples]
    answers = qa(pairs, doc_stride=16, max_answer_len=30)
    assert [answer["answer"] for answer in answers] == [predictions[row["id"]] for row in examples]
    # An unknown layout stops the run before any work.
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    run_config.output_dir, run_config.window_layout = str(tmp_path / "bad"), "blocks"
    with pytest.raises(ValueError, match="window_layout='blocks' is unknown"):
        run_qa(run_config)
    assert not (tmp_path / "bad").exists()


def test_the_default_layout_is_question_prefixed_only_where_block_relative_windows_span_several_blocks():
    relative = tiny_config(block_relative_positions=True, max_position_embeddings=66)  # b = 64, N = 128
    assert default_window_layout(relative, 128) == PREFIXED
    assert default_window_layout(relative, 64) is None  # one block per window: question_first
    assert default_window_layout(tiny_config(), 64) is None  # positions over the whole input
    relative.question_answering = {"window_layout": "question_first"}  # fine-tuned on it: the model's own
    assert default_window_layout(relative, 128) is None


def test_the_export_verifies_on_the_layout_the_model_was_fine_tuned_on(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer), block_relative_positions=True, block_size=32)
    match_tokenizer_to_config(tokenizer, config)
    question = tokenizer(VERIFICATION_QUESTION, add_special_tokens=False)["input_ids"]
    prefix = [tokenizer.cls_token_id, *question, tokenizer.sep_token_id]
    first_row = verification_batches(config, tokenizer, VERIFICATION_TEXT, [64])[64]["input_ids"][0].tolist()
    assert first_row[: len(prefix)] == prefix and first_row[32 : 32 + len(prefix)] != prefix
    config.question_answering = {"window_layout": PREFIXED}
    first_row = verification_batches(config, tokenizer, VERIFICATION_TEXT, [64])[64]["input_ids"][0].tolist()
    assert first_row[: len(prefix)] == prefix and first_row[32 : 32 + len(prefix)] == prefix
    assert tokenizer.pad_token_id not in first_row

"""The long-document QA pipeline: exact character spans, windows over contexts many times longer than N, SQuAD 2.0
null answers, batching, other QA models, bad inputs, and `pipeline("question-answering", trust_remote_code=True)`."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import SAMPLE_TEXT, planted_qa_model, tiny_config
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForQuestionAnswering,
    BertTokenizerFast,
    RobertaConfig,
    RobertaForQuestionAnswering,
    pipeline,
)

from blockbert_hf import BlockBertForQuestionAnswering, pipeline_question_answering
from blockbert_hf.model.pipeline_question_answering import (
    ExtractiveQuestionAnsweringPipeline,
    WindowLogits,
    _best_first,
    model_window_scoring,
    rank_answers,
)
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines


N = 64  # tiny_config's sequence length
FILLER_LINES = read_text_lines(SAMPLE_TEXT)[:200]
START_WORD, END_WORD = " Naktong", " perimeter"  # single tokens of the fixture tokenizer


def filler(tokens_wanted: int, tokenizer) -> str:
    """Real WikiText sentences, at least `tokens_wanted` tokens, free of the two marker tokens."""
    marker_ids = {tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))[0] for word in (START_WORD, END_WORD)}
    text, count = [], 0
    for line in FILLER_LINES:
        ids = tokenizer(line, add_special_tokens=False)["input_ids"]
        if marker_ids & set(ids):
            continue
        text.append(line)
        count += len(ids)
        if count >= tokens_wanted:
            return " ".join(text)
    raise AssertionError("the sample text is too short")


@pytest.fixture(scope="module")
def markers(tokenizer):
    """Token ids of the two marker words; each must be a single token of the fixture tokenizer."""
    ids = []
    for word in (START_WORD, END_WORD):
        pieces = tokenizer.tokenize(word)
        assert len(pieces) == 1, (word, pieces)
        ids.append(tokenizer.convert_tokens_to_ids(pieces)[0])
    return ids


def test_answers_are_exact_character_spans_of_the_context(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    qa = ExtractiveQuestionAnsweringPipeline(model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    context = "  " + filler(6 * N, tokenizer) + " \n"
    answers = qa(question="Who played the lead role?", context=context, top_k=10, max_answer_len=8)
    assert len(answers) == 10
    for answer in answers:
        assert 0 <= answer["start"] < answer["end"] <= len(context)
        assert answer["answer"] == context[answer["start"] : answer["end"]]
        assert answer["answer"] == answer["answer"].strip()  # offsets are trimmed to the token's characters
    scores = [answer["score"] for answer in answers]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-9
    assert len({(a["start"], a["end"]) for a in answers}) == 10  # spans seen in two windows are merged


@pytest.mark.parametrize("where", [0.0, 0.5, 0.97])
def test_a_planted_answer_is_found_in_a_context_twenty_times_longer_than_n(tokenizer, markers, where):
    qa = ExtractiveQuestionAnsweringPipeline(model=planted_qa_model(tokenizer, markers), tokenizer=tokenizer)
    text = filler(20 * N, tokenizer)
    cut = text.rfind(" ", 0, int(where * len(text))) if where else 0
    planted = f"{START_WORD.strip()} is a river and its{END_WORD}"
    context = f"{text[:cut]} {planted}{text[cut:]}"  # a space before the marker, as inside the text
    assert len(tokenizer(context)["input_ids"]) > 20 * N
    answer = qa(question="What is it?", context=context, doc_stride=16)
    start = context.index(planted)
    assert answer["answer"] == planted
    assert (answer["start"], answer["end"]) == (start, start + len(planted))
    assert answer["score"] > 0.5  # the other candidates share one marker at most


def test_impossible_answers_and_the_null_threshold(tokenizer, markers):
    qa = ExtractiveQuestionAnsweringPipeline(
        model=planted_qa_model(tokenizer, markers, null_strength=10.0), tokenizer=tokenizer
    )
    text = filler(5 * N, tokenizer)
    planted = f"{START_WORD.strip()} and{END_WORD}"
    with_answer = f"{text} {planted}. {text}"
    # The planted span beats the null answer; without it the null answer beats every filler span.
    assert qa(question="What?", context=with_answer, handle_impossible_answer=True)["answer"] == planted
    null = qa(question="What?", context=text, handle_impossible_answer=True)
    assert null == {"score": null["score"], "start": 0, "end": 0, "answer": ""} and null["score"] > 0.5
    assert qa(question="What?", context=text)["answer"] != ""  # SQuAD 1.1 mode always answers with a span
    top = qa(question="What?", context=text, handle_impossible_answer=True, top_k=3)
    assert top[0]["answer"] == "" and all(a["answer"] for a in top[1:])
    # A threshold larger than the null answer's margin lets the best span win.
    assert qa(question="What?", context=text, handle_impossible_answer=True, null_score_diff_threshold=50.0)["answer"]


def test_batches_give_the_same_answers_as_single_questions(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    qa = ExtractiveQuestionAnsweringPipeline(model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    long_text = filler(8 * N, tokenizer)
    examples = [
        {"question": "Where was he born?", "context": long_text},
        {"question": "When?", "context": FILLER_LINES[3]},
        {"question": "Who wrote the play that opened in the theatre?", "context": long_text[: len(long_text) // 3]},
        {"question": "Which ship?", "context": FILLER_LINES[10]},
    ]
    single = [qa(example, top_k=3) for example in examples]
    for batch_size in (2, 5):
        batched = qa(examples, top_k=3, batch_size=batch_size)
        for one, many in zip(single, batched):
            assert [(a["start"], a["end"], a["answer"]) for a in one] == [
                (a["start"], a["end"], a["answer"]) for a in many
            ]
            np.testing.assert_allclose([a["score"] for a in one], [a["score"] for a in many], atol=1e-5)
    # question=/context= lists are the same as a list of dicts
    paired = qa(question=[e["question"] for e in examples], context=[e["context"] for e in examples], top_k=3)
    assert [[a["answer"] for a in answers] for answers in paired] == [[a["answer"] for a in s] for s in single]


def test_serves_other_question_answering_models(tokenizer, tmp_path):
    """RoBERTa (no token types) and BERT (token_type_ids, WordPiece) QA models from transformers itself."""
    roberta = RobertaForQuestionAnswering(
        RobertaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=N + 2,
            pad_token_id=1,
            type_vocab_size=1,
        )
    ).eval()
    words = sorted({word for line in FILLER_LINES[:40] for word in line.lower().split() if word.isalpha()})
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "?"]) + "\n")
    bert_tokenizer = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"), model_max_length=N)
    bert = BertForQuestionAnswering(
        BertConfig(
            vocab_size=len(bert_tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=N,
        )
    ).eval()
    context = " ".join(FILLER_LINES[:6])
    for model, model_tokenizer in ((roberta, tokenizer), (bert, bert_tokenizer)):
        qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=model_tokenizer)
        answers = qa(question="who was in the film?", context=context, top_k=4, doc_stride=16)
        assert all(a["answer"] == context[a["start"] : a["end"]] and a["answer"] for a in answers)
        batched = qa(
            [{"question": "who was in the film?", "context": context}] * 2, top_k=4, doc_stride=16, batch_size=3
        )
        assert [a["answer"] for a in batched[1]] == [a["answer"] for a in answers]


def test_bad_inputs_get_clear_errors(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    qa = ExtractiveQuestionAnsweringPipeline(model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="context is empty"):
        qa(question="Who?", context="  \n")
    with pytest.raises(ValueError, match="question is empty"):
        qa(question=" ", context="Some text.")
    with pytest.raises(ValueError, match=r"room for only \d+ context tokens.*doc_stride = 32"):
        qa(question=" ".join(["Which battleship"] * 30), context="The battleship sank.")
    with pytest.raises(ValueError, match="doc_stride = 8"):  # longer than the whole window: no overlap helps
        qa(question=" ".join(["Which battleship"] * 30), context="The battleship sank.", doc_stride=8)
    with pytest.raises(ValueError, match="'question' and 'context' keys"):
        qa({"q": "Who?", "context": "Text."})
    with pytest.raises(ValueError, match="2 questions but 3 contexts"):
        qa(question=["a?", "b?"], context=["x", "y", "z"])
    with pytest.raises(TypeError, match="topk"):
        qa(question="Who?", context="Text.", topk=2)
    with pytest.raises(ValueError, match="top_k"):
        qa(question="Who?", context="Text.", top_k=0)
    with pytest.raises(ValueError, match="fast tokenizer"):
        ExtractiveQuestionAnsweringPipeline(model=qa.model, tokenizer=None)


@pytest.mark.parametrize(
    "parameter, value, message",
    [
        ("top_k", 1.5, "top_k must be a positive integer, got 1.5"),
        ("top_k", 0, "top_k must be a positive integer, got 0"),
        ("top_k", -1, "top_k must be a positive integer, got -1"),
        ("top_k", "3", "top_k must be a positive integer, got '3'"),
        ("top_k", True, "top_k must be a positive integer, got True"),
        ("max_answer_len", 2.5, "max_answer_len must be a positive integer"),
        ("max_answer_len", 0, "max_answer_len must be a positive integer"),
        ("n_best", 0, "n_best must be a positive integer"),
        ("doc_stride", 1.5, "doc_stride must be an integer >= 0, got 1.5"),
        ("doc_stride", -1, "doc_stride must be an integer >= 0, got -1"),
        ("max_seq_len", 40.0, "max_seq_len must be a positive integer, got 40.0"),
        ("max_seq_len", 0, "max_seq_len must be a positive integer, got 0"),
        ("max_seq_len", N + 1, rf"max_seq_len = {N + 1} exceeds the longest window .* \({N} tokens\)"),
        ("handle_impossible_answer", "no", "handle_impossible_answer must be True or False, got 'no'"),
        ("null_score_diff_threshold", "1", "null_score_diff_threshold must be a finite number, got '1'"),
    ],
)
def test_pipeline_parameters_of_the_wrong_type_or_range_get_clear_errors(tokenizer, parameter, value, message):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    model = BlockBertForQuestionAnswering(config).eval()
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=message):
        qa(question="Who?", context=FILLER_LINES[1], **{parameter: value})
    with pytest.raises(ValueError, match=message):  # at construction too
        ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, **{parameter: value})


def test_left_padding_tokenizers_are_switched_to_right_padding(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    tokenizer.padding_side = "left"
    try:
        qa = ExtractiveQuestionAnsweringPipeline(
            model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer
        )
        assert tokenizer.padding_side == "right"
        # Windows of different lengths in one batch: BlockBERT would reject left padding.
        qa(
            [{"question": "Who?", "context": FILLER_LINES[1]}, {"question": "Who?", "context": FILLER_LINES[2]}],
            batch_size=2,
        )
    finally:
        tokenizer.padding_side = "right"


CONTEXT = "alpha beta gamma delta epsilon"
OFFSETS = [None, (0, 5), (6, 10), (11, 16), (17, 22), (23, 30), None]  # CLS, 5 words, SEP


def window_logits(starts, ends, null=(0.0, 0.0)):
    """A window over CONTEXT: -5 everywhere except the given token logits and the null (CLS) token's."""
    start, end = np.full(7, -5.0), np.full(7, -5.0)
    for index, value in starts.items():
        start[index] = value
    for index, value in ends.items():
        end[index] = value
    start[0], end[0] = null
    return WindowLogits(start, end, OFFSETS, null_index=0)


@pytest.mark.parametrize("window_scoring", ["raw", "null_relative"])
def test_rank_answers_merges_windows_and_respects_limits(window_scoring):
    """With equal null scores in every window the two rules rank spans alike."""
    # Window 2 holds the best span "gamma delta"; "beta" scores in both windows and is merged.
    first = window_logits({2: 2.0}, {2: 2.0})
    second = window_logits({2: 1.0, 3: 4.0}, {2: 1.0, 4: 4.0})
    ranked = rank_answers([first, second], CONTEXT, n_best=3, max_answer_len=5, window_scoring=window_scoring)
    assert [a["answer"] for a in ranked.answers] == ["gamma delta", "beta gamma delta", "beta"]
    assert abs(sum(a["score"] for a in ranked.answers) - 1.0) < 1e-9 and ranked.null_probability == 0.0
    # max_answer_len = 1 token: only one-word spans
    ranked = rank_answers([first, second], CONTEXT, n_best=3, max_answer_len=1, window_scoring=window_scoring)
    assert ranked.answers[0]["answer"] == "beta" and all(" " not in a["answer"] for a in ranked.answers)
    with pytest.raises(ValueError, match="max_answer_len"):
        rank_answers([first], CONTEXT, max_answer_len=0, window_scoring=window_scoring)


def test_the_raw_rule_answers_from_a_window_without_the_answer_and_the_null_relative_rule_does_not():
    """A long document: the first window does not hold the answer (the model puts a high null score on it) but has a
    span with higher raw logits than the answer in the second window, whose null score is low."""
    without_answer = window_logits({2: 6.0}, {2: 6.0}, null=(8.0, 8.0))  # "beta": raw 12, null 16
    with_answer = window_logits({4: 4.0}, {4: 4.0}, null=(-3.0, -3.0))  # "delta": raw 8, null -6
    windows = [without_answer, with_answer]
    assert rank_answers(windows, CONTEXT, window_scoring="raw").answers[0]["answer"] == "beta"
    ranked = rank_answers(windows, CONTEXT, window_scoring="null_relative")
    assert ranked.answers[0]["answer"] == "delta"
    assert ranked.answers[0]["score"] > 0.99  # 14 against "beta"'s -4 (and other spans lower still)
    assert rank_answers(windows, CONTEXT).answers[0]["answer"] == "delta"  # the default rule
    with pytest.raises(ValueError, match="window_scoring='best' is unknown"):
        rank_answers(windows, CONTEXT, window_scoring="best")


# A window of the question-prefixed layout in two blocks: CLS "alpha beta" SEP CLS "gamma delta epsilon" SEP.
BLOCK_OFFSETS = [None, (0, 5), (6, 10), None, None, (11, 16), (17, 22), (23, 30), None]


def test_null_relative_scores_a_span_against_the_null_token_of_its_own_block():
    """In the question-prefixed layout each block has its own CLS. The first block's null score says nothing about a
    span of the second block: there, a span is scored against its own block's null token, and a block whose CLS says
    "no answer here" does not answer however high its raw logits."""
    start, end = np.full(9, -5.0), np.full(9, -5.0)
    start[0] = end[0] = 2.5  # first block: no answer here (null 5), "beta" 4
    start[2] = end[2] = 2.0
    start[4] = end[4] = 4.5  # second block: no answer here (null 9), "delta" 8
    start[6] = end[6] = 4.0
    blocks = WindowLogits(start, end, BLOCK_OFFSETS, null_index=0, block_null_indices=[0, 4])
    answer_window = window_logits({3: 1.0}, {3: 1.0})  # "gamma" 2 over null 0: the answer, in another window
    # Against the first block's null alone, "delta" (8 - 5 = 3) beats "gamma" (2).
    first_null_only = WindowLogits(start, end, BLOCK_OFFSETS, null_index=0)
    assert rank_answers([first_null_only, answer_window], CONTEXT).answers[0]["answer"] == "delta"
    ranked = rank_answers([blocks, answer_window], CONTEXT)
    assert ranked.answers[0]["answer"] == "gamma"
    scores = {answer["answer"]: answer["score"] for answer in ranked.answers}
    assert scores["delta"] == pytest.approx(scores["gamma"] * np.exp(-1 - 2))  # 8 - 9 = -1 against 2
    assert scores["beta"] == pytest.approx(scores["gamma"] * np.exp(-1 - 2))  # 4 - 5 = -1 against 2
    # The raw rule does not look at null tokens at all.
    assert rank_answers([blocks, answer_window], CONTEXT, window_scoring="raw").answers[0]["answer"] == "delta"


def test_the_null_answer_under_each_window_scoring_rule():
    """Raw: the lowest null score over the windows against the best span. Null-relative: 0 against each span's margin
    over its own window's null score, so the null answer wins when every window prefers it."""
    windows = [window_logits({3: 4.0}, {4: 4.0}, null=(3.0, 3.0)), window_logits({}, {}, null=(5.0, 5.0))]
    # raw: "gamma delta" 8.0 against the null 6.0; null-relative: 8.0 - 6.0 = 2.0 against 0
    for rule in ("raw", "null_relative"):
        ranked = rank_answers(windows, CONTEXT, handle_impossible_answer=True, window_scoring=rule)
        assert ranked.answers[0]["answer"] == "gamma delta"
        null = next(a for a in ranked.answers if a["answer"] == "")
        assert null["score"] == ranked.null_probability
        assert null["score"] == pytest.approx(np.exp(-2) / (1 + np.exp(-2)), rel=1e-3)
        ranked = rank_answers(
            windows, CONTEXT, handle_impossible_answer=True, null_score_diff_threshold=-3.0, window_scoring=rule
        )
        assert ranked.answers[0] == {"score": ranked.null_probability, "start": 0, "end": 0, "answer": ""}
    # The raw rule takes the lowest null score of any window; null-relative asks each window about its own spans.
    weak_span_elsewhere = [window_logits({3: 4.0}, {4: 4.0}, null=(6.0, 6.0)), window_logits({}, {}, null=(1.0, 1.0))]
    raw = rank_answers(weak_span_elsewhere, CONTEXT, handle_impossible_answer=True, window_scoring="raw")
    relative = rank_answers(weak_span_elsewhere, CONTEXT, handle_impossible_answer=True)
    assert raw.answers[0]["answer"] == "gamma delta" and relative.answers[0]["answer"] == ""


def test_the_pipeline_scores_windows_with_the_rule_the_model_was_trained_for(tokenizer, markers, monkeypatch):
    model = planted_qa_model(tokenizer, markers)
    assert model_window_scoring(model.config) == "null_relative"  # nothing recorded: the default
    model.config.question_answering = {"window_scoring": "raw"}
    assert model_window_scoring(model.config) == "raw"
    used = []
    original = pipeline_question_answering.rank_answers

    def recording(*args, **kwargs):
        used.append(kwargs["window_scoring"])
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline_question_answering, "rank_answers", recording)
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    inputs = {"question": "Who?", "context": f"{filler(30, tokenizer)}{START_WORD}{END_WORD}."}
    qa(inputs)
    qa(inputs, window_scoring="null_relative")
    assert used == ["raw", "null_relative"]
    with pytest.raises(ValueError, match="window_scoring='best' is unknown"):
        qa(inputs, window_scoring="best")
    model.config.question_answering = {"window_scoring": "best"}
    with pytest.raises(ValueError, match="config.json.* window_scoring = 'best'"):
        qa(inputs)


def test_answers_are_widened_to_whole_characters_of_decomposed_unicode(tokenizer, markers):
    """Byte-level BPE makes a combining accent a token of its own: the planted end token stops before it."""
    qa = ExtractiveQuestionAnsweringPipeline(model=planted_qa_model(tokenizer, markers), tokenizer=tokenizer)
    planted = f"{START_WORD.strip()} or{END_WORD}\u0301"
    context = f"{FILLER_LINES[2]} {planted} {FILLER_LINES[3]}"
    encoded = tokenizer(context, return_offsets_mapping=True, add_special_tokens=False)
    assert (context.index("\u0301"), context.index("\u0301") + 1) in encoded["offset_mapping"]
    answer = qa(question="What?", context=context)
    start = context.index(planted)
    assert (answer["answer"], answer["start"], answer["end"]) == (planted, start, start + len(planted))


def token_logits(offsets, starts, ends):
    """A window with the given start and end logits (`{token: logit}`), every other token far lower."""
    start, end = np.full(len(offsets), -20.0), np.full(len(offsets), -20.0)
    for logits, chosen in ((start, starts), (end, ends)):
        for index, value in chosen.items():
            logits[index] = value
    return WindowLogits(start, end, offsets, null_index=0)


def test_rank_answers_never_splits_a_grapheme_cluster():
    # "Jose" + combining acute accent, "Marti" + combining acute accent: the accents are tokens of their own.
    context = "Jose\u0301 Marti\u0301"
    offsets = [None, (0, 4), (4, 5), (6, 11), (11, 12), None]
    ranked = rank_answers([token_logits(offsets, {1: 4.0, 3: 1.0}, {1: 4.0, 3: 1.0})], context, max_answer_len=1)
    assert [(a["answer"], a["start"], a["end"]) for a in ranked.answers[:2]] == [
        ("Jose\u0301", 0, 5),
        ("Marti\u0301", 6, 12),
    ]
    # A span of the accent alone starts with its base letter.
    ranked = rank_answers([token_logits(offsets, {2: 4.0}, {2: 4.0})], context, max_answer_len=1)
    assert (ranked.answers[0]["answer"], ranked.answers[0]["start"]) == ("e\u0301", 3)

    # An emoji ZWJ sequence (man, ZWJ, woman, ZWJ, girl) is one character on screen, cut into five tokens here.
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    context = f"A family {family} photo"
    offsets = [None, (0, 1), (2, 8)] + [(9 + index, 10 + index) for index in range(5)] + [(15, 20), None]
    ranked = rank_answers([token_logits(offsets, {2: 4.0, 5: 2.0}, {3: 4.0, 8: 2.0})], context, n_best=3)
    assert [a["answer"] for a in ranked.answers] == [f"family {family}", f"family {family} photo", f"{family} photo"]
    for answer in ranked.answers:
        assert answer["answer"] == context[answer["start"] : answer["end"]]


def test_rank_answers_skips_whitespace_only_spans():
    context = "alpha\n\nbeta gamma"
    offsets = [None, (0, 5), (5, 7), (7, 11), (12, 17), None]
    window = token_logits(offsets, {2: 4.5, 3: 2.0, 4: 0.5}, {2: 4.5, 3: 2.0, 4: 0.5})
    for n_best in (1, 3):  # the next best span is found even when only one is kept per window
        ranked = rank_answers([window], context, n_best=n_best, max_answer_len=1)
        assert ranked.answers[0]["answer"] == "beta"
        assert all(answer["answer"].strip() for answer in ranked.answers)
    # The null answer is still offered as before.
    ranked = rank_answers([window], context, n_best=1, max_answer_len=1, handle_impossible_answer=True)
    assert [a["answer"] for a in ranked.answers] == ["beta", ""]


def test_in_memory_model_with_pipeline_factory(tokenizer, markers, tmp_path):
    """For a model object: build the class directly, or pass `config=model.config` once the config carries
    `custom_pipelines` (every BlockBERT save_pretrained adds it); transformers 5 raises KeyError otherwise."""
    model = planted_qa_model(tokenizer, markers)
    context = f"{FILLER_LINES[2]} {START_WORD.strip()} and{END_WORD} {FILLER_LINES[3]}"
    direct = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)(question="What?", context=context)
    with pytest.raises(KeyError, match="question-answering"):
        pipeline(
            "question-answering", model=model, tokenizer=tokenizer, pipeline_class=ExtractiveQuestionAnsweringPipeline
        )
    model.save_pretrained(tmp_path / "saved")
    assert "question-answering" in model.config.custom_pipelines
    qa = pipeline(
        "question-answering",
        model=model,
        tokenizer=tokenizer,
        config=model.config,
        pipeline_class=ExtractiveQuestionAnsweringPipeline,
    )
    assert qa(question="What?", context=context) == direct
    # pipeline() rewrites the config's entry in place ("pt" names become classes): saving again must still work.
    model.save_pretrained(tmp_path / "saved_again")
    saved = json.loads((tmp_path / "saved_again" / "config.json").read_text())
    assert saved["custom_pipelines"]["question-answering"]["pt"] == ["AutoModelForQuestionAnswering"]


def test_pipeline_from_a_saved_folder_without_the_package(tmp_path, tokenizer, markers):
    """`pipeline("question-answering", model=folder, trust_remote_code=True)` in a process where every
    `import blockbert_hf...` fails gives the answers of the package's own pipeline; a model loaded that way and saved
    again still carries the pipeline."""
    model = planted_qa_model(tokenizer, markers, null_strength=10.0)
    save_atomically(tmp_path / "model", model.save_pretrained, tokenizer.save_pretrained)
    assert (tmp_path / "model" / "pipeline_question_answering.py").is_file()
    text = filler(4 * N, tokenizer)
    planted = f"{START_WORD.strip()} or{END_WORD}"
    context = f"{text} {planted} {text}"
    calls = [
        {"context": context},
        {"context": text, "handle_impossible_answer": True},
        {"context": text, "top_k": 3, "doc_stride": 16, "max_answer_len": 4},
    ]
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys

        class BlockPackage(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "blockbert_hf":
                    raise ImportError(f"{{name}} is blocked")

        sys.meta_path.insert(0, BlockPackage())
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline
        folder, again = {str(tmp_path / "model")!r}, {str(tmp_path / "again")!r}
        qa = pipeline("question-answering", model=folder, trust_remote_code=True)
        results = [type(qa).__name__, [qa(question="What?", **call) for call in {calls!r}]]
        model = AutoModelForQuestionAnswering.from_pretrained(folder, trust_remote_code=True)
        model.save_pretrained(again)
        AutoTokenizer.from_pretrained(folder, trust_remote_code=True).save_pretrained(again)
        qa_again = pipeline("question-answering", model=again, trust_remote_code=True)
        results.append(qa_again(question="What?", context={context!r}))
        results.append(sorted(name for name in sys.modules if name.split(".")[0] == "blockbert_hf"))
        print(json.dumps(results))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    name, answers, found_again, imported = json.loads(result.stdout.strip().splitlines()[-1])
    assert name == "ExtractiveQuestionAnsweringPipeline" and imported == []
    found, null, top = answers
    start = context.index(planted)
    assert found == found_again
    assert (found["answer"], found["start"], found["end"]) == (planted, start, start + len(planted))
    assert (null["answer"], null["start"], null["end"]) == ("", 0, 0)
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    for got, call in zip(answers, calls):
        want = qa(question="What?", **call)
        got, want = (got, want) if isinstance(got, list) else ([got], [want])
        assert [(a["start"], a["end"], a["answer"]) for a in got] == [(a["start"], a["end"], a["answer"]) for a in want]
        np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-5)


def test_pipeline_on_a_folder_without_tokenizer_files_says_so(tmp_path, tokenizer, markers):
    """No special-tokens-only stand-in: the error names the missing files and how to save a tokenizer."""
    planted_qa_model(tokenizer, markers).save_pretrained(tmp_path)
    with pytest.raises(OSError, match="has no tokenizer files") as caught:
        qa = pipeline("question-answering", model=str(tmp_path), trust_remote_code=True)
        qa(question="What?", context=FILLER_LINES[2])
    assert "tokenizer.json" in str(caught.value) and "save_pretrained" in str(caught.value)


@pytest.mark.parametrize("candidates", [1, 7, 60, 1000])
def test_spans_are_ranked_exactly_as_a_full_stable_sort_ranks_them(candidates):
    """The ranking sorts only the best spans unless more are read; read to the end, it is the full stable sort:
    best first, ties in index order (ties at the cut included), impossible spans (-inf) left out."""
    rng = np.random.default_rng(candidates)
    for _ in range(20):
        scores = rng.integers(-3, 4, size=300).astype(np.float64)  # many ties
        scores[rng.random(300) < 0.2] = -np.inf
        valid = np.flatnonzero(np.isfinite(scores))
        assert list(_best_first(scores, candidates)) == list(valid[np.argsort(-scores[valid], kind="stable")])


# --- what the pipeline refuses before any window runs -----------------------------------------------------------------


def recorded_window_lengths(model) -> list[int]:
    """The length of every window the model runs on, recorded as it runs."""
    lengths = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    return lengths


@pytest.mark.parametrize(
    "question, context, message",
    [
        (5, "Some text.", "question must be a string or a non-empty list of strings, got 5"),
        ([], "Some text.", "question must be a string or a non-empty list of strings, got \\[\\]"),
        ("Who?", 5, "context must be a string or a non-empty list of strings, got 5"),
        ("Who?", [], "context must be a string or a non-empty list of strings"),
        (["Who?", 5], "Some text.", "The question is not a string: 5"),
        ("Who?", ["Some text.", None], "The context is not a string: None"),
    ],
)
def test_questions_and_contexts_that_are_not_strings_get_clear_errors(tokenizer, question, context, message):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    model = BlockBertForQuestionAnswering(config).eval()
    lengths = recorded_window_lengths(model)
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=message):
        qa(question=question, context=context)
    with pytest.raises(ValueError, match="an empty list of inputs"):
        qa([])
    assert lengths == []


def test_a_context_or_question_without_visible_text_is_refused_and_invisible_spans_are_never_answers(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    qa = ExtractiveQuestionAnsweringPipeline(model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    for invisible in ("\u200b", "\u200b \u2060\n\u200d\ufeff"):  # zero width space, word joiner, ZWJ, BOM
        with pytest.raises(ValueError, match="The context is empty: it has no visible character"):
            qa(question="Who?", context=invisible)
        with pytest.raises(ValueError, match="The question is empty: it has no visible character"):
            qa(question=invisible, context="Some text.")
    context = "alpha \u200b\u200d beta"
    offsets = [None, (0, 5), (6, 8), (9, 13), None]
    window = token_logits(offsets, {2: 5.0, 1: 1.0, 3: 0.5}, {2: 5.0, 1: 1.0, 3: 0.5})
    ranked = rank_answers([window], context, max_answer_len=1)
    assert [answer["answer"] for answer in ranked.answers] == ["alpha", "beta"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ("raw", r"config.question_answering \(the \"question_answering\" field of the model's config.json\) is 'raw'"),
        ({"window_scoring": "best"}, r"config.json.* window_scoring = 'best', which is not one of"),
        ({"window_layout": "blocks"}, r"config.json.* window_layout = 'blocks', which is not one of"),
    ],
)
def test_question_answering_settings_the_pipeline_cannot_use_are_refused_before_any_window_runs(
    tokenizer, markers, settings, message
):
    model = planted_qa_model(tokenizer, markers)
    lengths = recorded_window_lengths(model)
    model.config.question_answering = settings
    with pytest.raises(ValueError, match=message):
        ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    del model.config.question_answering
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    model.config.question_answering = settings  # changed after the pipeline was built: refused when it is called
    inputs = {"question": "Who?", "context": filler(6 * N, tokenizer)}
    with pytest.raises(ValueError, match=message):
        qa(inputs)
    assert lengths == []
    if isinstance(settings, dict):  # an argument that overrides the recorded setting is used instead
        assert qa(inputs, window_scoring="raw", window_layout="question_first")["answer"]


def test_windows_reach_the_n_of_a_block_relative_model_loaded_with_more_blocks(tmp_path, tokenizer, markers):
    """The saved tokenizer records the N the model was saved with (64); loaded with four blocks, the model takes 128."""
    model = planted_qa_model(tokenizer, markers, block_relative_positions=True, block_size=32)
    save_atomically(tmp_path / "model", model.save_pretrained, tokenizer.save_pretrained)
    loaded = BlockBertForQuestionAnswering.from_pretrained(tmp_path / "model", num_blocks=4, heads_per_shift=[1] * 4)
    saved_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert (loaded.config.max_sequence_length, saved_tokenizer.model_max_length) == (2 * N, N)
    lengths = recorded_window_lengths(loaded)
    qa = ExtractiveQuestionAnsweringPipeline(model=loaded.eval(), tokenizer=saved_tokenizer)
    context = filler(6 * N, tokenizer)
    for max_seq_len in (None, 2 * N):  # the default, and asked for
        lengths.clear()
        qa(question="Who?", context=context, max_seq_len=max_seq_len)
        assert max(lengths) == 2 * N, lengths

"""Where each question's answer starts in the window that holds it, for the sets of contexts filled to N tokens: the
first answer's first token in its first question-first window of N tokens, as `run_qa` lays the windows out (None where
no window holds the whole answer). With n = 2 blocks of N / 2, an answer past N / 2 lies in the block that reads the
question only through the heads shifted by one; the Stage A report splits F1 there.

    python experiments/answer_blocks.py --data_dir $DATA_DIR --tokenizer $MINILM \
        --results_dir results/distillation/stage_a

Writes `answer_blocks.json` in the results folder, per set the answer tokens in the order of the set's `ids` in
`questions.json` (and their digest, which each cell's scores carry)."""

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer

from blockbert_hf.saving import write_json_atomically
from blockbert_hf.train.qa.features import prepare_train_features

from .layout import read_json
from .scores import ids_digest


ANSWER_BLOCKS_FILE = "answer_blocks.json"
FILLED_SETS = ("dev_window_512", "window_512")


def answer_tokens(tokenizer, squad: dict, ids: list[str], max_seq_length: int, doc_stride: int) -> list[int | None]:
    """Per question of `ids`, the first answer's first token in the first window that holds the whole answer."""
    rows = {
        qa["id"]: (qa["question"], paragraph["context"], qa["answers"][0])
        for article in squad["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    }
    missing = [question_id for question_id in ids if question_id not in rows]
    if missing:
        raise ValueError(f"{len(missing)} question(s) of questions.json are not in the data, e.g. {missing[0]!r}.")
    tokens = []
    for question_id in ids:  # one question at a time: the windows do not say which question they come from
        question, context, answer = rows[question_id]
        example = {
            "id": [question_id],
            "question": [question],
            "context": [context],
            "answers": [{"answer_start": [answer["answer_start"]], "text": [answer["text"]]}],
        }
        starts = prepare_train_features(example, tokenizer, max_seq_length, doc_stride)["start_positions"]
        tokens.append(next((start for start in starts if start != 0), None))  # 0: the null ([CLS]) token
    return tokens


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="experiments/build_long_context_qa.py's output folder")
    parser.add_argument("--tokenizer", required=True, help="the tokenizer the cells were trained with")
    parser.add_argument("--results_dir", required=True, help="a comparison's results folder, with questions.json")
    parser.add_argument("--max_seq_length", type=int, default=512)
    parser.add_argument("--doc_stride", type=int, default=128)
    args = parser.parse_args(argv)
    questions = read_json(Path(args.results_dir) / "questions.json")
    if not questions:
        parser.error(f"{args.results_dir} has no questions.json: run the comparison's cells first.")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sets = {}
    for name in FILLED_SETS:
        ids = questions[name]["ids"]
        squad = json.loads((Path(args.data_dir) / f"{name}.json").read_text(encoding="utf-8"))
        tokens = answer_tokens(tokenizer, squad, ids, args.max_seq_length, args.doc_stride)
        sets[name] = {"ids_sha256": ids_digest(ids), "answer_token": tokens}
    # The folders as variables, as the cells' recorded commands name them.
    command = (
        f"python experiments/answer_blocks.py --data_dir $DATA_DIR --tokenizer $TOKENIZER --results_dir "
        f"{args.results_dir} --max_seq_length {args.max_seq_length} --doc_stride {args.doc_stride}"
    )
    record = {"command": command, "max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride, "sets": sets}
    write_json_atomically(Path(args.results_dir) / ANSWER_BLOCKS_FILE, record)
    return 0

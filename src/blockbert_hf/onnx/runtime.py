"""Running an exported BlockBERT with ONNX Runtime: `OnnxBlockBert` (outputs by name) and
`OnnxBlockBertForQuestionAnswering` (in the question-answering pipeline), with the input checks an exported program
cannot make (`check_inputs`, docs/attention.md, "Inputs"). Export itself is `blockbert_hf.onnx.export`.

ONNX Runtime needs the `export` extra (`pip install blockbert-hf[export]`).
"""

import logging
import shutil
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig
from transformers.modeling_outputs import QuestionAnsweringModelOutput

from ..model.configuration_blockbert import BlockBertConfig
from ..saving import atomic_directory


logger = logging.getLogger(__name__)

INPUT_NAMES = ("input_ids", "attention_mask")
TOKEN_TYPE_INPUT = "token_type_ids"
ONNX_FILE = "model.onnx"
# ONNX Runtime's dynamic int8 quantization of model.onnx (`--quantize`), and what its verification measured.
INT8_ONNX_FILE = "model_int8.onnx"


def input_names(config: BlockBertConfig) -> tuple[str, ...]:
    """The inputs of an exported program: `input_ids` and `attention_mask`, and `token_type_ids` when the model has
    more than one token type (BERT-derived models tell a question (0) from its context (1) with them)."""
    return INPUT_NAMES + (TOKEN_TYPE_INPUT,) if config.type_vocab_size > 1 else INPUT_NAMES


def _integer_array(name: str, values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise ValueError(
            f"{name} has dtype {array.dtype}; expected integers (int64). Pass the tokenizer's output as it is, or "
            f"convert with {name}.astype('int64') only if the values are whole numbers."
        )
    return array


def check_inputs(config: BlockBertConfig, input_ids, attention_mask=None, token_type_ids=None) -> None:
    """The checks an exported program cannot make (docs/attention.md, "Inputs"), on torch tensors or numpy arrays:
    integer `(batch, L)` ids in `[0, vocab_size)` with `batch >= 1` and `1 <= L <= N`, a 0/1 mask of the same shape
    padded on the right, and token type ids of the same shape in `[0, type_vocab_size)`. Raises a clear
    `ValueError`."""
    input_ids = _integer_array("input_ids", input_ids)
    if input_ids.ndim != 2:
        raise ValueError(
            f"input_ids has shape {input_ids.shape}; expected (batch_size, sequence_length). For a single sequence "
            "add the batch dimension (input_ids[None])."
        )
    batch_size, seq_len = input_ids.shape
    max_len = config.max_sequence_length
    if batch_size == 0:
        raise ValueError("input_ids holds no sequence (batch_size = 0): pass at least one.")
    if seq_len == 0:
        raise ValueError(
            "input_ids is empty (L = 0 tokens): an empty input has nothing to encode. Pass at least one token (a "
            "tokenizer adds its special tokens to an empty text)."
        )
    if seq_len > max_len:
        raise ValueError(
            f"The input has L = {seq_len} tokens but this model takes 1 to N = {max_len}: truncate the input "
            f"(tokenizer(..., truncation=True, max_length={max_len}))."
        )
    if input_ids.min() < 0 or input_ids.max() >= config.vocab_size:
        raise ValueError(
            f"input_ids holds ids from {input_ids.min()} to {input_ids.max()}, outside this model's vocabulary "
            f"[0, {config.vocab_size}): encode the text with the tokenizer saved beside the model."
        )
    if attention_mask is not None:
        attention_mask = np.asarray(attention_mask)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {attention_mask.shape}, expected input_ids' shape {input_ids.shape}."
            )
        if not np.isin(attention_mask, (0, 1)).all():
            raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token).")
        is_real = attention_mask.astype(bool)
        left_padded = (is_real[:, 1:] & ~is_real[:, :-1]).any(axis=1)
        if left_padded.any():
            raise ValueError(
                f"attention_mask rows {np.flatnonzero(left_padded).tolist()} have padding before a real token. "
                "BlockBERT expects right padding: use tokenizer.padding_side = 'right'."
            )
    if token_type_ids is not None:
        token_type_ids = _integer_array("token_type_ids", token_type_ids)
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids has shape {token_type_ids.shape}, expected input_ids' shape {input_ids.shape}."
            )
        if token_type_ids.min() < 0 or token_type_ids.max() >= config.type_vocab_size:
            raise ValueError(
                f"token_type_ids holds values from {token_type_ids.min()} to {token_type_ids.max()}; this model has "
                f"{config.type_vocab_size} token type(s): use 0 to {config.type_vocab_size - 1}."
            )


CPU_PROVIDER = "CPUExecutionProvider"


def onnx_file_in(folder: Path, file_name: str | None) -> Path:
    """The ONNX file to load from `folder`: `file_name`, else `model.onnx`, else the folder's only `.onnx` file."""
    if file_name is None:
        found = sorted(path.name for path in folder.glob("*.onnx")) if folder.is_dir() else []
        if len(found) > 1 and ONNX_FILE not in found:
            raise ValueError(f"{folder} holds several ONNX files ({', '.join(found)}): pick one with file_name=.")
        file_name = found[0] if len(found) == 1 else ONNX_FILE
    if not (folder / file_name).is_file():
        raise ValueError(
            f"{folder} has no {file_name}: give a folder written by examples/export_onnx.py (with --quantize for "
            f"{INT8_ONNX_FILE}) or by save_pretrained."
        )
    return folder / file_name


class OnnxBlockBert:
    """Runs an exported BlockBERT with ONNX Runtime after checking its inputs on the host (`check_inputs`):
    `OnnxBlockBert.from_pretrained(folder)(input_ids, attention_mask, token_type_ids)` -> `{output name: numpy array}`.
    `token_type_ids` is required when the model has more than one token type (pass the tokenizer's).

    Loading takes optimum's `ORTModel` arguments, with the same names and meanings: `file_name` (default `model.onnx`,
    or the folder's only ONNX file), `provider` (default `"CPUExecutionProvider"`), `provider_options` and
    `session_options` (an `onnxruntime.SessionOptions`; default ONNX Runtime's: every graph optimisation, one thread
    per physical core). `save_pretrained(folder)` writes the ONNX file and the config, to load back the same way.

    `provider="CUDAExecutionProvider"` (with the `onnxruntime-gpu` package) is accepted but untested here: the project
    has no GPU to test it on. Inputs and outputs are host arrays either way, and int8 files run their quantized
    products on the CPU (CUDA has no kernel for them)."""

    def __init__(
        self,
        folder: str | Path,
        config: BlockBertConfig | None = None,
        file_name: str | None = None,
        *,
        provider: str = CPU_PROVIDER,
        session_options=None,
        provider_options: dict | None = None,
    ):
        import onnxruntime

        folder = Path(folder)
        self.path = onnx_file_in(folder, file_name)
        available = onnxruntime.get_available_providers()
        if provider not in available:
            hint = " (install onnxruntime-gpu instead of onnxruntime)" if provider == "CUDAExecutionProvider" else ""
            raise ValueError(f"ONNX Runtime here has no {provider}{hint}; it has: {', '.join(available)}.")
        self.config = config or AutoConfig.from_pretrained(folder)
        # As in optimum: the CPU behind another provider, for the operators that provider lacks.
        providers = [provider] if provider == CPU_PROVIDER else [provider, CPU_PROVIDER]
        options = [provider_options or {}] + [{}] * (len(providers) - 1)
        self.session = onnxruntime.InferenceSession(
            str(self.path), sess_options=session_options, providers=providers, provider_options=options
        )
        if self.session.get_providers()[0] != provider:  # ONNX Runtime falls back to the CPU without a word
            raise ValueError(
                f"ONNX Runtime could not start {provider} (it runs on {self.session.get_providers()}): check the "
                "provider's libraries (for CUDA: the CUDA and cuDNN versions onnxruntime-gpu was built for)."
            )
        self.provider = provider
        self.input_names = [graph_input.name for graph_input in self.session.get_inputs()]
        self.output_names = [output.name for output in self.session.get_outputs()]

    @classmethod
    def from_pretrained(
        cls,
        folder: str | Path,
        *,
        file_name: str | None = None,
        provider: str = CPU_PROVIDER,
        session_options=None,
        provider_options: dict | None = None,
        config: BlockBertConfig | None = None,
    ) -> "OnnxBlockBert":
        """The model in `folder` (written by `examples/export_onnx.py` or `save_pretrained`) on ONNX Runtime."""
        return cls(
            folder,
            config,
            file_name,
            provider=provider,
            session_options=session_options,
            provider_options=provider_options,
        )

    def save_pretrained(self, folder: str | Path) -> None:
        """Writes the ONNX file (under its name) and the config into `folder` (created if needed; its other files are
        kept), to load back with `from_pretrained(folder)`. Save the tokenizer beside it as with transformers
        (`tokenizer.save_pretrained(folder)`)."""
        with atomic_directory(folder, update=True) as out:
            shutil.copyfile(self.path, out / self.path.name)
            self.config.save_pretrained(out)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, np.ndarray]:
        check_inputs(self.config, input_ids, attention_mask, token_type_ids)
        input_ids = np.asarray(input_ids, dtype=np.int64)
        attention_mask = np.ones_like(input_ids) if attention_mask is None else np.asarray(attention_mask, np.int64)
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        if TOKEN_TYPE_INPUT in self.input_names:
            if token_type_ids is None:
                raise ValueError(
                    f"This model has {self.config.type_vocab_size} token types: pass token_type_ids (the tokenizer "
                    "makes them: 0 for a question, 1 for its context; all 0 for a single text)."
                )
            feed[TOKEN_TYPE_INPUT] = np.asarray(token_type_ids, dtype=np.int64)
        elif token_type_ids is not None and np.asarray(token_type_ids).any():
            raise ValueError(f"{ONNX_FILE} takes no token_type_ids (the model has one token type): leave them out.")
        return dict(zip(self.output_names, self.session.run(None, feed)))


class OnnxBlockBertForQuestionAnswering:
    """An exported question-answering folder as a model the question-answering pipeline runs on ONNX Runtime:

        model = OnnxBlockBertForQuestionAnswering.from_pretrained("OUT")  # or file_name="model_int8.onnx"
        qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained("OUT"))

    The pipeline then cuts contexts into the same windows (layout, block size) and ranks answers by the same rule as
    with the PyTorch model, both read from the saved config. Called like the PyTorch model (ids as tensors, numpy
    arrays or lists), it returns its `QuestionAnsweringModelOutput` (start and end logits) after `OnnxBlockBert`'s
    host checks; what the exported program has no input for (`inputs_embeds`, `position_ids`, ...) is refused.

    `from_pretrained` and `save_pretrained` take optimum's `ORTModelForQuestionAnswering` arguments with the same
    names and meanings (`file_name`, `provider`, `session_options`, `provider_options`; see `OnnxBlockBert`, which
    also says what is untested: the CUDA provider). Inputs and outputs stay on the host (`device` is the CPU)
    whichever provider computes."""

    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, runner: OnnxBlockBert):
        if "start_logits" not in runner.output_names:
            raise ValueError(
                f"The exported model outputs {runner.output_names}, not start and end logits: export a "
                "BlockBertForQuestionAnswering folder for question answering."
            )
        self.runner = runner
        self.config = runner.config

    @classmethod
    def from_pretrained(cls, folder: str | Path, **loading) -> "OnnxBlockBertForQuestionAnswering":
        """The question-answering model in `folder` (written by `examples/export_onnx.py` or `save_pretrained`);
        `loading`: `OnnxBlockBert.from_pretrained`'s `file_name`, `provider`, `session_options`, `provider_options`."""
        return cls(OnnxBlockBert.from_pretrained(folder, **loading))

    def save_pretrained(self, folder: str | Path) -> None:
        """`OnnxBlockBert.save_pretrained`: the ONNX file and the config; save the tokenizer beside them."""
        self.runner.save_pretrained(folder)

    def __call__(
        self, input_ids=None, attention_mask=None, token_type_ids=None, return_dict=None, **other_inputs
    ) -> QuestionAnsweringModelOutput | tuple:
        # Arguments left at their defaults (None; False for the output_* flags) ask for nothing the program lacks.
        unsupported = sorted(name for name, value in other_inputs.items() if value is not None and value is not False)
        if unsupported:
            raise ValueError(
                f"The exported model has no input for {', '.join(unsupported)}: it takes input_ids, attention_mask "
                "and token_type_ids only. Run the PyTorch model (BlockBertForQuestionAnswering) for the others."
            )
        if input_ids is None:
            raise ValueError("Pass input_ids, the token ids the tokenizer makes: the exported model reads them.")
        inputs = (_host_array(value) for value in (input_ids, attention_mask, token_type_ids))
        outputs = self.runner(*inputs)
        output = QuestionAnsweringModelOutput(
            start_logits=torch.from_numpy(outputs["start_logits"]), end_logits=torch.from_numpy(outputs["end_logits"])
        )
        return output.to_tuple() if return_dict is False else output

    def to(self, device):
        """Inputs and outputs stay on the host: other devices are refused (ONNX Runtime's `provider` chooses where the
        model computes)."""
        if torch.device(device).type != "cpu":
            raise ValueError(
                f"OnnxBlockBertForQuestionAnswering runs on the CPU (ONNX Runtime), not on {device}: its inputs and "
                "outputs stay on the host; to compute on a GPU load it with provider='CUDAExecutionProvider'."
            )
        return self

    def eval(self):
        return self

    def can_generate(self) -> bool:
        return False


def _host_array(value) -> np.ndarray | None:
    """A tensor (on any device), numpy array or nested list as a numpy array."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return None if value is None else np.asarray(value)

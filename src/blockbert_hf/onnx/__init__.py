"""ONNX export and ONNX Runtime: `export` (programs for every batch size and length up to N, ONNX files, the
verified export of a folder, int8 quantization), `runtime` (running an exported model, alone or in the
question-answering pipeline), and the graph work they need (`attention`, `length_switch`, `quantization`,
`int8_per_token`). Needs the `export` extra (`pip install blockbert-hf[export]`)."""

from .export import OnnxExportArguments, export_onnx, export_onnx_folder, export_program, quantize_int8
from .runtime import OnnxBlockBert, OnnxBlockBertForQuestionAnswering, check_inputs


__all__ = [
    "OnnxBlockBert",
    "OnnxBlockBertForQuestionAnswering",
    "OnnxExportArguments",
    "check_inputs",
    "export_onnx",
    "export_onnx_folder",
    "export_program",
    "quantize_int8",
]

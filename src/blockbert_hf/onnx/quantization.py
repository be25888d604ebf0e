"""int8 for ONNX Runtime on the CPU: how `blockbert_hf.onnx.export.quantize_int8` quantizes one exported graph
(`Int8Recipe`), and the CPU feature int8 speed depends on (`cpu_has_vnni`).

Only the matrix products with a weight are quantized: attention's products of two activations (scores, weighted
values), the embedding tables and the task head's output projection (`qa_outputs`, `classifier`: its error goes
straight into the logits the answer is chosen from, and it is a tiny part of the work) stay in fp32. ONNX Runtime's
pre-processing (graph optimisation, shape inference) runs first, so that the quantizer sees the graph the runtime runs.

Each product's weight is stored in int8 and its input activation quantized at run time; what differs is the range one
activation scale covers (`Int8Recipe.activations`):

- `"per_block"` (the default): ONNX Runtime's `MatMulNBits` with 8-bit weights and `accuracy_level=4`: one scale per
  token and per block of `block_size` input channels, one weight scale per output channel and block. BERT-style
  encoders put activations dozens of times larger than the rest in a few channels of a few tokens (here the [CLS]
  tokens); a scale per token keeps them from costing every other token its precision, and makes a window's result
  independent of the windows batched with it. The file runs on any CPU ONNX Runtime has kernels for (ONNX Runtime
  1.22 or later on x86). Its 8-bit kernel is only a little faster than fp32.
- `"per_token"`: one scale per token over all its channels, built from standard operators around ONNX Runtime's fast
  uint8-by-int8 `MatMulInteger` (`blockbert_hf.onnx.int8_per_token`). A channel that is large in every token would
  set each token's scale, so each product's input is first smoothed as SmoothQuant does (`smoothing`: its strength;
  per-channel maxima measured on calibration inputs, by default the export's verification text): a channel's range is
  moved into the weights, which int8 holds per output channel. Faster than `"per_block"`, but it changes more
  answers. 7-bit weights (`reduce_range`) where the CPU has no VNNI, as for `"per_tensor"`.
- `"per_tensor"`: ONNX Runtime's `quantize_dynamic`: one scale for a whole activation tensor (every token of every
  window in the batch), weights per output channel (`per_channel`), in 7 bits (`reduce_range`) where the CPU quantizing
  has no VNNI (without it int8 products are summed in pairs in 16 bits and can saturate). Faster, but on the demo model
  it changes a quarter of the whole-article answers.

`results/benchmarks/int8_recipe.json` records the variants measured on a development article before the default was
chosen (`benchmarks/int8_recipe.py`).
"""

import ast
import dataclasses
import logging
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path


# The exporter records every node's module path in this metadata entry: how the task head's nodes are found.
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
# CPU flags (as /proc/cpuinfo names them) of the instructions that multiply int8 without 16-bit saturation.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
ACTIVATION_SCALES = ("per_token", "per_block", "per_tensor")
# MatMulNBits' int8 computation: activations quantized per block at run time, int8 dot products.
INT8_COMPUTE = 4
# The first ONNX Runtime with 8-bit MatMulNBits kernels for x86.
PER_BLOCK_MINIMUM_ORT = "1.22"


@dataclass(frozen=True)
class Int8Recipe:
    """How `quantize_graph` quantizes an exported graph; the defaults are the chosen recipe (module docstring).

    `activations`: `"per_block"` (a scale per token and block of `block_size` channels, `MatMulNBits`),
    `"per_token"` (a scale per token, `MatMulInteger`) or `"per_tensor"` (one scale per activation tensor,
    `quantize_dynamic`).
    `fp32_modules`: the modules whose matrix products stay in fp32, each the end of a module path (`"qa_outputs"`,
    `"layer.5.output.dense"`).
    `smoothing` applies to `"per_token"`: SmoothQuant's strength (0..1; None: no smoothing).
    `per_channel`, `quantize_embeddings` apply to `"per_tensor"`: one weight scale per output channel, the embedding
    tables in int8 too. `reduce_range` applies to `"per_token"` and `"per_tensor"`: weights in 7 bits (None: decided
    by the CPU quantizing, 7 bits without VNNI; the file is then best run on a CPU like the one that made it)."""

    activations: str = "per_block"
    smoothing: float | None = 0.5
    block_size: int = 128
    fp32_modules: tuple[str, ...] = ("qa_outputs", "classifier")
    preprocess: bool = True
    per_channel: bool = True
    quantize_embeddings: bool = False
    reduce_range: bool | None = None

    def __post_init__(self):
        if self.activations not in ACTIVATION_SCALES:
            raise ValueError(f"activations must be one of {ACTIVATION_SCALES}, got {self.activations!r}.")
        if self.smoothing is not None and not 0 <= self.smoothing <= 1:
            raise ValueError(
                f"smoothing must be between 0 and 1 (SmoothQuant's strength) or None, got {self.smoothing}."
            )
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of 2 of at least 16 (e.g. 128), got {self.block_size}.")

    def resolved(self) -> "Int8Recipe":
        """The recipe with `reduce_range` decided for this CPU (per-token and per-tensor activations; left None
        otherwise)."""
        if self.activations == "per_block" or self.reduce_range is not None:
            return self
        return dataclasses.replace(self, reduce_range=cpu_has_vnni() is False)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "fp32_modules": list(self.fp32_modules)}


# What `quantize_int8` did before: ONNX Runtime's `quantize_dynamic` defaults (one scale per activation tensor and per
# weight matrix, the head and the embedding tables in int8). Kept to measure against (`benchmarks/int8_recipe.py`).
DEFAULT_ORT_RECIPE = Int8Recipe(
    activations="per_tensor", per_channel=False, fp32_modules=(), quantize_embeddings=True, preprocess=False
)


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo, or None where there is no such file."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_has_vnni() -> bool | None:
    """Whether this CPU has an int8 dot-product instruction (AVX512-VNNI, AVX-VNNI or AMX on x86): True or False on
    x86 Linux, None where it cannot be told (no /proc/cpuinfo) or does not apply (ARM CPUs have their own)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return None
    flags = cpu_flags()
    return None if flags is None else any(flag in flags for flag in VNNI_FLAGS)


def _module_nodes(graph, modules: tuple[str, ...]) -> list[str]:
    """The names of the nodes that belong to one of `modules`, each the end of a module path (`"qa_outputs"`,
    `"layer.5.output.dense"`), by the path the exporter recorded for every node (`model.qa_outputs`)."""
    names = []
    for node in graph.node:
        recorded = next((entry.value for entry in node.metadata_props if entry.key == NAME_SCOPES_KEY), "[]")
        scopes = ast.literal_eval(recorded)  # e.g. "['', 'model', 'model.qa_outputs', 'linear_36']"
        if any(scope == module or scope.endswith(f".{module}") for scope in scopes for module in modules):
            names.append(node.name)
    return names


def check_onnxruntime_version(recipe: Int8Recipe) -> None:
    """Refuses per-block activations with an ONNX Runtime older than `PER_BLOCK_MINIMUM_ORT`, before any work."""
    import onnxruntime
    from packaging.version import Version

    if recipe.activations == "per_block" and Version(onnxruntime.__version__) < Version(PER_BLOCK_MINIMUM_ORT):
        raise ValueError(
            f"int8 with per-block activations needs onnxruntime >= {PER_BLOCK_MINIMUM_ORT} (8-bit MatMulNBits); this "
            f"is {onnxruntime.__version__}: pip install -U onnxruntime, or quantize with activations='per_tensor'."
        )


def _quantize_per_block(source: Path, target: Path, recipe: Int8Recipe, kept_in_fp32: list[str], calibration) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer_logger = logging.getLogger(MatMulNBitsQuantizer.__module__)
    level = quantizer_logger.level
    quantizer_logger.setLevel(max(level, logging.WARNING))  # it logs every node it quantizes or skips at INFO
    quantizer = MatMulNBitsQuantizer(
        onnx.load(source),
        bits=8,
        block_size=recipe.block_size,
        is_symmetric=True,
        accuracy_level=INT8_COMPUTE,
        nodes_to_exclude=kept_in_fp32,
    )
    try:
        quantizer.process()
    finally:
        quantizer_logger.setLevel(level)
    quantizer.model.save_model_to_file(str(target))


def _quantize_per_token(source: Path, target: Path, recipe: Int8Recipe, kept_in_fp32: list[str], calibration) -> None:
    import onnx

    from .int8_per_token import input_maxima, quantize_per_token  # needs onnx, an optional dependency

    model = onnx.load(source)
    maxima = None
    if recipe.smoothing is not None:
        if not calibration:
            raise ValueError("Per-token int8 with smoothing needs calibration inputs (a list of model input dicts).")
        maxima = input_maxima(model, kept_in_fp32, calibration)
    quantize_per_token(model, kept_in_fp32, 7 if recipe.reduce_range else 8, maxima, recipe.smoothing)
    onnx.save(model, target)


def _quantize_per_tensor(source: Path, target: Path, recipe: Int8Recipe, kept_in_fp32: list[str], calibration) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        target,
        op_types_to_quantize=["MatMul", "Gather"] if recipe.quantize_embeddings else ["MatMul"],
        per_channel=recipe.per_channel,
        reduce_range=recipe.reduce_range,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=kept_in_fp32,
        extra_options={"MatMulConstBOnly": True},
    )


QUANTIZERS = {"per_token": _quantize_per_token, "per_block": _quantize_per_block, "per_tensor": _quantize_per_tensor}


def quantize_graph(
    source: str | Path, target: str | Path, recipe: Int8Recipe | None = None, calibration: list[dict] | None = None
) -> Int8Recipe:
    """Writes `target`: the int8 quantization of the graph at `source` (one without an `If` on the length: the
    quantizers do not look inside one) as `recipe` (default `Int8Recipe()`) says; `calibration`: model inputs
    (`{input name: array}`) the per-token recipe's smoothing measures activations on. Returns the recipe applied,
    `reduce_range` decided."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    recipe = (recipe or Int8Recipe()).resolved()
    check_onnxruntime_version(recipe)
    source, target = Path(source), Path(target)
    # Named before pre-processing, which keeps node names but drops the metadata that says where a node came from.
    kept_in_fp32 = _module_nodes(onnx.load(source).graph, recipe.fp32_modules)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        if recipe.preprocess:
            optimized = Path(scratch, "preprocessed.onnx")
            # ONNX Runtime's symbolic shape inference cannot follow the exporter's dynamic reshapes; ONNX's own can.
            quant_pre_process(source, optimized, skip_symbolic_shape=True)
            source = optimized
        QUANTIZERS[recipe.activations](source, target, recipe, kept_in_fp32, calibration)
    return recipe

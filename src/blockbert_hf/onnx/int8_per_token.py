"""int8 matrix products with one activation scale per token, from standard ONNX operators
(`blockbert_hf.onnx.quantization`, recipe `activations="per_token"`).

ONNX Runtime's quantizers offer one activation scale per tensor (`quantize_dynamic`: fast, but a few tokens' large
activations cost every other token its precision) or per token and block of channels (`MatMulNBits`: precise, but its
8-bit kernel is barely faster than fp32). Here each product `x @ W` with an fp32 weight becomes:

    rows   = x as (tokens, K)
    scale  = max(|rows|, per row) / 127                      one scale per token, computed at run time
    q      = QuantizeLinear(rows, scale, 128, axis=0)         uint8, centred on 128
    y      = Cast(MatMulInteger(q, W_int8, 128)) * scale * weight_scale,  back to x's leading shape

with `W_int8` and `weight_scale` (one per output channel) computed once here. `MatMulInteger` of uint8 by int8 is
ONNX Runtime's fast integer product (VNNI where the CPU has it). The quantization of an input shared by several
products (a layer's query, key and value) is made once.

A channel that is large in every token would set every token's scale. With smoothing (SmoothQuant, Xiao et al.,
2023), `rows` are first divided per channel by `smoothing_factors`, computed from the channels' largest values on
calibration inputs (`input_maxima`), and W's rows multiplied by them: the same product, with the channel's range
moved into the weights, which int8 holds per output channel.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper


ACTIVATION_ZERO_POINT = 128
ACTIVATION_MAX = 127
PREFIX = "per_token_int8/"


def quantized_weight(weight: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """`weight` (K, N) as int8 with one symmetric scale per output column, in `bits` bits (8, or 7 for CPUs whose
    uint8-by-int8 products sum pairs in 16 bits): `(int8 weight, fp32 scales (N,))`."""
    largest = 2 ** (bits - 1) - 1
    scale = np.abs(weight).max(axis=0) / largest
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.round(weight / scale), -largest, largest).astype(np.int8), scale


class _GraphBuilder:
    """New nodes and initializers for one graph, under unique names."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}

    def constant(self, name: str, value: np.ndarray) -> str:
        name = PREFIX + name
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(value, name)
        return name

    def add(self, op_type: str, inputs: list[str], output: str, **attributes) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attributes))
        return output


def _quantize_rows(build: _GraphBuilder, x: str, k: int, smoothing: np.ndarray | None) -> dict[str, str]:
    """Nodes quantizing `x` (..., K) per token, divided by `smoothing` (K,) first where given: `{"rows": uint8
    (tokens, K), "scale": fp32 (tokens, 1), "leading": x's shape without its last dimension}`."""
    name = PREFIX + x
    rows = build.add("Reshape", [x, build.constant(f"rows_of_{k}", np.array([-1, k], np.int64))], f"{name}/rows")
    if smoothing is not None:
        inverse = build.constant(f"{x}/inverse_smoothing", (1 / smoothing).astype(np.float32))
        rows = build.add("Mul", [rows, inverse], f"{name}/smoothed")
    magnitude = build.add("Abs", [rows], f"{name}/abs")
    last_axis = build.constant("last_axis", np.array([-1], np.int64))
    largest = build.add("ReduceMax", [magnitude, last_axis], f"{name}/largest", keepdims=0)
    scale = build.add(
        "Mul", [largest, build.constant("one_in_max", np.array(1 / ACTIVATION_MAX, np.float32))], f"{name}/scale_raw"
    )
    # A row of zeros would get scale 0 and divide by it; the smallest normal float keeps it finite (and still 0).
    scale = build.add(
        "Max", [scale, build.constant("tiny", np.array(np.finfo(np.float32).tiny, np.float32))], f"{name}/scale"
    )
    zero_point = build.constant("zero_point", np.array(ACTIVATION_ZERO_POINT, np.uint8))
    zero_points = build.add(
        "Expand", [zero_point, build.add("Shape", [scale], f"{name}/tokens")], f"{name}/zero_points"
    )
    quantized = build.add("QuantizeLinear", [rows, scale, zero_points], f"{name}/quantized", axis=0)
    shape = build.add("Shape", [x], f"{name}/shape")
    leading = build.add("Slice", [shape, build.constant("zero", np.array([0], np.int64)), last_axis], f"{name}/leading")
    return {
        "rows": quantized,
        "scale": build.add("Unsqueeze", [scale, last_axis], f"{name}/row_scale"),
        "leading": leading,
    }


def _integer_product(build: _GraphBuilder, node: onnx.NodeProto, rows: dict, weight: np.ndarray, bits: int) -> None:
    """Nodes computing `node`'s output from the per-token quantized input `rows` and `weight` in int8."""
    label = node.name or node.output[0]
    name = PREFIX + label
    weight_int8, weight_scale = quantized_weight(weight, bits)
    weight_name = build.constant(f"{label}/weight", weight_int8)
    zero_point = build.constant("zero_point", np.array(ACTIVATION_ZERO_POINT, np.uint8))
    product = build.add("MatMulInteger", [rows["rows"], weight_name, zero_point], f"{name}/product")
    product = build.add("Cast", [product], f"{name}/product_fp32", to=onnx.TensorProto.FLOAT)
    product = build.add("Mul", [product, rows["scale"]], f"{name}/token_scaled")
    scale_name = build.constant(f"{label}/weight_scale", weight_scale)
    product = build.add("Mul", [product, scale_name], f"{name}/scaled")
    columns = build.constant(f"columns_{weight.shape[1]}", np.array([weight.shape[1]], np.int64))
    shape = build.add("Concat", [rows["leading"], columns], f"{name}/shape", axis=0)
    build.nodes.append(helper.make_node("Reshape", [product, shape], list(node.output), name=f"{name}/reshape"))


def smoothing_factors(channel_maxima: np.ndarray, weights: list[np.ndarray], strength: float) -> np.ndarray:
    """SmoothQuant's per-channel factors for an input whose channels reach `channel_maxima` (K,)
    and the weights (K, N) that read it: `max|x_k| ** strength / max|W_k| ** (1 - strength)`. Dividing the input's
    channel k by it and multiplying the weights' row k by it leaves the product unchanged, and moves a channel's
    outliers into the weights, where int8 holds them per output channel."""
    weight_maxima = np.max([np.abs(weight).max(axis=1) for weight in weights], axis=0)
    factors = np.maximum(channel_maxima, 1e-5) ** strength / np.maximum(weight_maxima, 1e-5) ** (1 - strength)
    return np.where(np.isfinite(factors) & (factors > 0), factors, 1.0).astype(np.float32)


def weight_products(model: onnx.ModelProto, nodes_to_exclude: list[str]) -> dict[str, list[onnx.NodeProto]]:
    """The `MatMul`s of `model`'s graph with a 2-D fp32 initializer as second input (a weight), not named in
    `nodes_to_exclude`, by the input they multiply."""
    weights = {initializer.name: initializer for initializer in model.graph.initializer}
    products: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if (
            weight is not None
            and node.name not in nodes_to_exclude
            and len(weight.dims) == 2
            and weight.data_type == onnx.TensorProto.FLOAT
        ):
            products.setdefault(node.input[0], []).append(node)
    return products


def quantize_per_token(
    model: onnx.ModelProto,
    nodes_to_exclude: list[str],
    bits: int = 8,
    maxima: dict[str, np.ndarray] | None = None,
    smoothing: float | None = None,
) -> int:
    """Rewrites, in place, the products `weight_products` finds into int8 products with per-token activation scales
    (module docstring). With `smoothing` (SmoothQuant's strength, 0..1), each input is first smoothed by
    `smoothing_factors` from `maxima` (`{input name: max |x| per channel}`, measured on calibration inputs).
    Weights no node reads any more are dropped. Returns how many products were rewritten."""
    graph = model.graph
    if any(opset.domain in ("", "ai.onnx") and opset.version < 18 for opset in model.opset_import):
        raise ValueError("per-token int8 needs an ONNX opset of 18 or later (ReduceMax's axes as an input).")
    products = weight_products(model, nodes_to_exclude)
    if smoothing is not None and set(products) - set(maxima or {}):
        raise ValueError("Smoothing needs the calibration maxima of every input of a weight product.")
    weights = {initializer.name: numpy_helper.to_array(initializer) for initializer in graph.initializer}
    rewritten = {node.output[0] for nodes in products.values() for node in nodes}
    build, quantized_inputs, factors = _GraphBuilder(), {}, {}
    for node in graph.node:
        if node.output[0] not in rewritten:
            build.nodes.append(node)
            continue
        x = node.input[0]
        if x not in quantized_inputs:  # once per input, for all the products reading it
            if smoothing is not None:
                factors[x] = smoothing_factors(maxima[x], [weights[n.input[1]] for n in products[x]], smoothing)
            quantized_inputs[x] = _quantize_rows(build, x, weights[node.input[1]].shape[0], factors.get(x))
        weight = weights[node.input[1]] if x not in factors else weights[node.input[1]] * factors[x][:, None]
        _integer_product(build, node, quantized_inputs[x], weight, bits)
    read = {name for node in build.nodes for name in node.input}
    kept = [initializer for initializer in graph.initializer if initializer.name in read]
    del graph.node[:], graph.initializer[:]
    graph.node.extend(build.nodes)
    graph.initializer.extend(kept + list(build.initializers.values()))
    return len(rewritten)


def input_maxima(model: onnx.ModelProto, nodes_to_exclude: list[str], feeds: list[dict]) -> dict[str, np.ndarray]:
    """The largest |x| per channel of every input of a weight product (`weight_products`) over the model inputs
    `feeds`, run with ONNX Runtime: what `smoothing_factors` is computed from. (ONNX Runtime's calibrators keep one
    range per tensor; smoothing needs one per channel.)"""
    import onnxruntime

    names = list(weight_products(model, nodes_to_exclude))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in names)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL  # keeps every value
    session = onnxruntime.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = {graph_input.name for graph_input in session.get_inputs()}
    maxima: dict[str, np.ndarray] = {}
    for feed in feeds:
        values = session.run(names, {name: value for name, value in feed.items() if name in wanted})
        for name, value in zip(names, values):
            largest = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            maxima[name] = largest if name not in maxima else np.maximum(maxima[name], largest)
    return maxima

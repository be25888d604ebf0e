"""int8 products with per-token activation scales (`blockbert_hf.onnx.int8_per_token`): what the rewritten graph
computes on ONNX Runtime, which products it rewrites, and SmoothQuant's smoothing."""

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from blockbert_hf.onnx.int8_per_token import input_maxima, quantize_per_token, smoothing_factors
from blockbert_hf.onnx.quantization import cpu_has_vnni


K, N = 64, 48
# The weights' bits the export chooses on this CPU: 7 without VNNI, where ONNX Runtime sums uint8-by-int8 products in
# pairs in 16 bits and 8-bit weights saturate. Each bit fewer doubles the weights' rounding step, and the error with it.
BITS = 7 if cpu_has_vnni() is False else 8
PRECISION = 0.01 * 2 ** (8 - BITS)


def product_model(weights: dict[str, np.ndarray], shared_input: bool = True) -> onnx.ModelProto:
    """A graph of `x (batch, tokens, K)` times each weight (named by its output), all reading `x` (or, without
    `shared_input`, the second reading `x + 0`)."""
    nodes, initializers = [], []
    source = "x"
    for index, (name, weight) in enumerate(weights.items()):
        if index == 1 and not shared_input:
            initializers.append(numpy_helper.from_array(np.zeros(K, np.float32), "zero"))
            nodes.append(helper.make_node("Add", ["x", "zero"], ["x_copy"], name="copy"))
            source = "x_copy"
        initializers.append(numpy_helper.from_array(weight, f"{name}_weight"))
        nodes.append(helper.make_node("MatMul", [source, f"{name}_weight"], [name], name=f"{name}_product"))
    graph = helper.make_graph(
        nodes,
        "products",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "tokens", K])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in weights],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    return {name: (rng.standard_normal((K, N)) * 0.1).astype(np.float32) for name in ("first", "second")}


def test_per_token_products_keep_each_tokens_precision_next_to_a_large_token(weights):
    """One token 200 times larger than the rest (as BERT's [CLS] activations are) sets only its own scale: every
    other token's product stays within about 1% of fp32 (2% in 7 bits), in the input's leading shape."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, K)).astype(np.float32)
    x[0, 0] *= 200
    model = product_model(weights)
    expected = run(model, x)
    assert quantize_per_token(model, [], BITS) == 2
    for actual, reference in zip(run(model, x), expected):
        assert actual.shape == reference.shape == (2, 7, N)
        error = np.abs(actual - reference).reshape(-1, N)[1:].mean() / np.abs(reference).reshape(-1, N)[1:].mean()
        assert error < PRECISION
        assert np.abs(actual - reference)[0, 0].mean() < 2 * PRECISION * np.abs(reference[0, 0]).mean()  # and its own


def test_an_input_read_by_several_products_is_quantized_once_and_excluded_products_stay_fp32(weights):
    model = product_model({**weights, "head": weights["first"][:, :2].copy()})
    assert quantize_per_token(model, ["head_product"]) == 2
    types = op_types(model)
    assert types.count("QuantizeLinear") == 1 and types.count("MatMulInteger") == 2
    assert [node.name for node in model.graph.node if node.op_type == "MatMul"] == ["head_product"]
    stored = {initializer.name: initializer.data_type for initializer in model.graph.initializer}
    assert "first_weight" not in stored and "second_weight" not in stored  # no fp32 copy left behind
    assert stored["head_weight"] == onnx.TensorProto.FLOAT
    integer_weights = [node.input[1] for node in model.graph.node if node.op_type == "MatMulInteger"]
    assert all(stored[name] == onnx.TensorProto.INT8 for name in integer_weights)

    separate = product_model(weights, shared_input=False)
    quantize_per_token(separate, [])
    assert op_types(separate).count("QuantizeLinear") == 2


def test_tokens_of_zeros_give_zeros_not_nans(weights):
    x = np.zeros((1, 3, K), np.float32)
    x[0, 1] = 1.0
    model = product_model(weights)
    quantize_per_token(model, [])
    first, _ = run(model, x)
    assert np.isfinite(first).all() and not first[0, 0].any() and not first[0, 2].any()


def test_smoothing_moves_a_large_channel_into_the_weights(weights):
    """A channel 50 times larger in every token sets every token's scale; smoothing (SmoothQuant, strength 0.5)
    divides it out of the input and into the weights: the error falls, and the factors leave the product unchanged
    in exact arithmetic."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 16, K)).astype(np.float32)
    x[..., 5] *= 50
    maxima = {"x": np.abs(x).reshape(-1, K).max(axis=0)}
    factors = smoothing_factors(maxima["x"], list(weights.values()), 0.5)
    assert factors.shape == (K,) and factors[5] > 3 * np.median(factors)
    np.testing.assert_allclose(
        (x / factors) @ (weights["first"] * factors[:, None]), x @ weights["first"], rtol=1e-4, atol=1e-4
    )

    errors = {}
    for smoothing in (None, 0.5):
        model = product_model(weights)
        expected = run(model, x)
        quantize_per_token(model, [], BITS, maxima=maxima, smoothing=smoothing)
        errors[smoothing] = np.mean([np.abs(a - b).mean() / np.abs(b).mean() for a, b in zip(run(model, x), expected)])
    assert errors[0.5] < 0.6 * errors[None]


def test_calibration_measures_each_products_input_and_smoothing_needs_it(weights):
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 5, K)).astype(np.float32)} for _ in range(3)]
    model = product_model(weights, shared_input=False)
    maxima = input_maxima(model, [], feeds)
    expected = np.max([np.abs(feed["x"][0]).max(axis=0) for feed in feeds], axis=0)
    assert set(maxima) == {"x", "x_copy"}
    np.testing.assert_allclose(maxima["x"], expected)
    np.testing.assert_allclose(maxima["x_copy"], expected)
    with pytest.raises(ValueError, match="calibration maxima"):
        quantize_per_token(product_model(weights), [], smoothing=0.5)


def test_weights_in_seven_bits_stay_within_seven_bits(weights):
    model = product_model(weights)
    quantize_per_token(model, [], bits=7)
    stored = {initializer.name: numpy_helper.to_array(initializer) for initializer in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "MatMulInteger":
            assert np.abs(stored[node.input[1]]).max() == 63

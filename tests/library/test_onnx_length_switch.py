"""`blockbert_hf.onnx.length_switch`: two graphs joined into one ONNX model by an `If` on the input's length, weights
stored once, and split back (on small hand-made graphs; the exported BlockBERT files are checked in test_export.py)."""

import numpy as np
import pytest


onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from blockbert_hf.onnx.length_switch import split_by_length, switch_by_length  # noqa: E402


WEIGHT = np.arange(4, dtype=np.float32)


def graph_model(op_type: str, input_name: str = "input_ids", constant: float = 1.0) -> onnx.ModelProto:
    """`(batch, L) ids -> (batch, L) floats`: `ids * weight[0] + c` (short) or `ids * weight[1] + c` (long), where
    `weight` is one shared initializer and `c` a constant of each graph, named alike in both."""
    index = 0 if op_type == "short" else 1
    nodes = [
        helper.make_node("Cast", [input_name], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("Gather", ["weight", "index"], ["scale"]),
        helper.make_node("Mul", ["as_float", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "offset"], ["logits"]),
    ]
    initializers = [
        numpy_helper.from_array(WEIGHT, "weight"),
        numpy_helper.from_array(np.array(index, dtype=np.int64), "index"),
        numpy_helper.from_array(np.array(constant, dtype=np.float32), "offset"),
    ]
    graph = helper.make_graph(
        nodes,
        "model",
        [helper.make_tensor_value_info(input_name, TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence"])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def run(model: onnx.ModelProto, input_ids: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"input_ids": input_ids})[0]


def test_runs_the_graph_made_for_the_length_and_stores_shared_weights_once():
    short, long = graph_model("short", constant=1.0), graph_model("long", constant=2.0)
    joined = switch_by_length(short, long, short_max_length=3)
    for length in (1, 3, 4, 7):
        input_ids = np.arange(2 * length, dtype=np.int64).reshape(2, length)
        expected = run(short if length <= 3 else long, input_ids)
        np.testing.assert_array_equal(run(joined, input_ids), expected)
    outer = {initializer.name for initializer in joined.graph.initializer}
    assert "weight" in outer  # equal in both graphs: stored once
    (switch,) = joined.graph.node[2:]
    for branch in switch.attribute:
        names = {initializer.name for initializer in branch.g.initializer}
        assert "weight" not in names and any(name.endswith("offset") for name in names)  # offsets differ: kept


def test_split_gives_back_the_two_graphs():
    short, long = graph_model("short", constant=1.0), graph_model("long", constant=2.0)
    split_short, split_long, short_max_length = split_by_length(switch_by_length(short, long, short_max_length=3))
    assert short_max_length == 3
    input_ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    np.testing.assert_array_equal(run(split_short, input_ids), run(short, input_ids))
    np.testing.assert_array_equal(run(split_long, input_ids), run(long, input_ids))
    assert split_by_length(short) is None


def test_graphs_with_other_inputs_are_refused():
    with pytest.raises(ValueError, match="take different inputs"):
        switch_by_length(graph_model("short"), graph_model("long", input_name="ids"), short_max_length=3)


def with_nested_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its last node (`Add`) inside an `If` on whether the first id is even: both branches compute the
    same sum, from the values and weights of the graph around them."""
    add = model.graph.node[-1]

    def branch(name: str) -> onnx.GraphProto:
        inner = helper.make_node("Add", list(add.input), [f"{name}_sum"])
        output = helper.make_tensor_value_info(f"{name}_sum", TensorProto.FLOAT, None)
        return helper.make_graph([inner], name, [], [output])

    nodes = [
        *model.graph.node[:-1],
        helper.make_node("ReduceMin", ["input_ids"], ["smallest"], keepdims=0),
        helper.make_node("Mod", ["smallest", "two"], ["remainder"]),
        helper.make_node("Equal", ["remainder", "zero"], ["even"]),
        helper.make_node("If", ["even"], list(add.output), then_branch=branch("even"), else_branch=branch("odd")),
    ]
    constants = [
        numpy_helper.from_array(np.array(value, dtype=np.int64), name) for name, value in (("two", 2), ("zero", 0))
    ]
    graph = helper.make_graph(
        nodes, "model", model.graph.input, model.graph.output, [*model.graph.initializer, *constants]
    )
    return helper.make_model(graph, opset_imports=model.opset_import)


def test_graphs_holding_nested_graphs_are_joined_and_split():
    """The exported graphs hold an `If` per attention call (`onnx_attention.skip_mask_when_all_keys_real`): the names
    its branches read are renamed with the graph around them."""
    short = with_nested_graph(graph_model("short", constant=1.0))
    long = with_nested_graph(graph_model("long", constant=2.0))
    joined = switch_by_length(short, long, short_max_length=3)
    for length in (1, 3, 4, 7):
        input_ids = np.arange(2 * length, dtype=np.int64).reshape(2, length) + length % 2
        expected = run(short if length <= 3 else long, input_ids)
        np.testing.assert_array_equal(run(joined, input_ids), expected)
    split_short, split_long, _ = split_by_length(joined)
    input_ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    np.testing.assert_array_equal(run(split_short, input_ids), run(short, input_ids))
    np.testing.assert_array_equal(run(split_long, input_ids), run(long, input_ids))

"""One ONNX model from two exported graphs of the same model, each valid for a range of sequence lengths: an `If` on
the input's length runs the graph made for it, and the weights both graphs hold are stored once.

torch.export makes one program per range of lengths of a blockwise model (`blockbert_hf.onnx.export.length_ranges`);
ONNX users expect one `model.onnx`. torch's ONNX exporter has no way to join programs, so the graphs are joined here.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper


LENGTH_INPUT = "input_ids"
SHORT_PREFIX, LONG_PREFIX, SHARED_PREFIX = "short/", "long/", "shared/"
SHORT_MAX_LENGTH = "short_max_length"


def _shared_initializers(first: onnx.GraphProto, second: onnx.GraphProto) -> tuple[dict[str, str], dict[str, str]]:
    """The initializers the two graphs hold with equal values (the weights, some of them transposed by the exporter
    under names of its own), stored once in the outer graph: for each graph, `{its name: the shared name}`."""

    def key(initializer: onnx.TensorProto):
        value = numpy_helper.to_array(initializer)
        return value.dtype.str, value.shape, value.tobytes()

    second_by_value = {key(initializer): initializer.name for initializer in second.initializer}
    first_names, second_names = {}, {}
    for initializer in first.initializer:
        other = second_by_value.get(key(initializer))
        if other is not None:
            shared = initializer.name if other == initializer.name else SHARED_PREFIX + initializer.name
            first_names[initializer.name], second_names[other] = shared, shared
    return first_names, second_names


def _copy(proto, name: str):
    """A copy of a named ONNX proto (tensor, value info) under `name`."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    copy.name = name
    return copy


def _renamed_nodes(nodes, rename, node_name, path: str = "") -> list[onnx.NodeProto]:
    """Copies of `nodes` with every value name passed through `rename` and node names through `node_name`, inside the
    graphs they hold too (an `If` branch reads the values of the graph around it by name)."""
    renamed = []
    for index, node in enumerate(nodes):
        renamed.append(_copy(node, node_name(node.name or f"{path}{node.op_type}_{index}")))  # unnamed: a name
        renamed[-1].input[:] = [rename(value) for value in node.input]
        renamed[-1].output[:] = [rename(value) for value in node.output]
        for attribute in renamed[-1].attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                attribute.g.CopyFrom(_renamed_subgraph(attribute.g, rename, node_name, f"{renamed[-1].name}/"))
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for graph in attribute.graphs:
                    graph.CopyFrom(_renamed_subgraph(graph, rename, node_name, f"{renamed[-1].name}/"))
    return renamed


def _renamed_subgraph(graph: onnx.GraphProto, rename, node_name, path: str) -> onnx.GraphProto:
    inputs = [_copy(value, rename(value.name)) for value in graph.input]
    return _renamed_graph(graph, rename, node_name, lambda name: True, inputs, graph.name, path)


def _renamed_graph(
    graph: onnx.GraphProto, rename, node_name, keep_initializer, inputs, name, path: str = ""
) -> onnx.GraphProto:
    """`graph` with every value name passed through `rename`, node names through `node_name` (in nested graphs too),
    only the initializers `keep_initializer` accepts, and `inputs` as its inputs."""
    nodes = _renamed_nodes(graph.node, rename, node_name, path)
    initializers = [_copy(value, rename(value.name)) for value in graph.initializer if keep_initializer(value.name)]
    outputs = [_copy(value, rename(value.name)) for value in graph.output]
    value_info = [_copy(value, rename(value.name)) for value in graph.value_info]
    return helper.make_graph(nodes, name, inputs, outputs, initializers, value_info=value_info)


def _values_read(graph: onnx.GraphProto) -> set[str]:
    """The names the nodes of `graph` read, in the graphs they hold too."""
    read = set()
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            nested = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            for subgraph in nested:
                read |= _values_read(subgraph)
    return read


def _as_branch(graph: onnx.GraphProto, prefix: str, shared: dict[str, str], outer_inputs: set[str]) -> onnx.GraphProto:
    """`graph` as the body of an `If` branch: no inputs of its own (it reads the outer graph's inputs and shared
    weights by name), every other name prefixed so the two branches cannot collide."""

    def rename(name: str) -> str:
        return name if not name or name in outer_inputs else shared.get(name, prefix + name)

    def is_own(name: str) -> bool:
        return name not in shared

    return _renamed_graph(graph, rename, lambda name: prefix + name, is_own, [], prefix.rstrip("/"))


def switch_by_length(short: onnx.ModelProto, long: onnx.ModelProto, short_max_length: int) -> onnx.ModelProto:
    """One model that runs `short` on inputs of at most `short_max_length` tokens (the length of `input_ids`, axis 1)
    and `long` on longer ones. Both must take the same inputs and give the same outputs (names and order)."""
    if [value.name for value in short.graph.input] != [value.name for value in long.graph.input]:
        raise ValueError("The two graphs take different inputs; they cannot be joined by length.")
    if [value.name for value in short.graph.output] != [value.name for value in long.graph.output]:
        raise ValueError("The two graphs give different outputs; they cannot be joined by length.")
    if short.opset_import != long.opset_import:
        raise ValueError("The two graphs use different opsets; they cannot be joined by length.")
    inputs = {value.name for value in short.graph.input}
    short_shared, long_shared = _shared_initializers(short.graph, long.graph)
    length, limit, is_short = "sequence_length", SHORT_MAX_LENGTH, "is_short"
    nodes = [
        helper.make_node("Shape", [LENGTH_INPUT], [length], name="sequence_length", start=1, end=2),
        helper.make_node("LessOrEqual", [length, limit], [is_short], name="is_short"),
        helper.make_node(
            "If",
            [is_short],
            [output.name for output in short.graph.output],
            name="by_length",
            then_branch=_as_branch(short.graph, SHORT_PREFIX, short_shared, inputs),
            else_branch=_as_branch(long.graph, LONG_PREFIX, long_shared, inputs),
        ),
    ]
    weights = [
        _copy(value, short_shared[value.name]) for value in short.graph.initializer if value.name in short_shared
    ]
    weights.append(numpy_helper.from_array(np.array([short_max_length], dtype=np.int64), limit))
    graph = helper.make_graph(nodes, short.graph.name, short.graph.input, short.graph.output, weights)
    model = helper.make_model(graph, opset_imports=short.opset_import, ir_version=short.ir_version)
    model.producer_name, model.producer_version = short.producer_name, short.producer_version
    onnx.checker.check_model(model)
    return model


def _as_model(switch: onnx.ModelProto, branch: onnx.GraphProto, prefix: str) -> onnx.ModelProto:
    """A branch of `switch_by_length`'s model as a standalone model (the outer inputs, outputs and the shared weights
    it reads; its own names without the branch prefix)."""
    outer = switch.graph

    def restore(name: str) -> str:
        return name.removeprefix(prefix)

    graph = _renamed_graph(branch, restore, restore, lambda name: True, outer.input, outer.name)
    used = _values_read(branch)
    graph.initializer.extend(value for value in outer.initializer if value.name in used)
    model = helper.make_model(graph, opset_imports=switch.opset_import, ir_version=switch.ir_version)
    model.producer_name, model.producer_version = switch.producer_name, switch.producer_version
    return model


def split_by_length(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto, int] | None:
    """The inverse of `switch_by_length`: `(short, long, short_max_length)`, or None when `model` was not made by it
    (tools that do not look inside an `If`, like ONNX Runtime's quantization, run on the two models)."""
    switches = [node for node in model.graph.node if node.op_type == "If" and node.name == "by_length"]
    limits = [initializer for initializer in model.graph.initializer if initializer.name == SHORT_MAX_LENGTH]
    if len(switches) != 1 or len(limits) != 1:
        return None
    branches = {attribute.name: attribute.g for attribute in switches[0].attribute}
    short = _as_model(model, branches["then_branch"], SHORT_PREFIX)
    long = _as_model(model, branches["else_branch"], LONG_PREFIX)
    return short, long, int(numpy_helper.to_array(limits[0]).item())

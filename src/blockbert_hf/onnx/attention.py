"""Attention exported as ONNX Runtime's fused `com.microsoft.MultiHeadAttention` (docs/export.md, "Attention in the
exported graph").

Traced through torch's ONNX exporter, the sdpa kernel becomes a dozen separate ops per head group (two MatMuls, the
mask's Add, Softmax, Transposes). During an export, `exported_attention` sets the model's kernel to
`FUSED_ATTENTION`: each head group's call on its tiles is one custom op, `blockbert_hf::key_masked_attention`, which
computes sdpa in PyTorch and becomes one `MultiHeadAttention` node in ONNX with the tiles' key padding mask.
`skip_mask_when_all_keys_real` then puts each of those nodes in an `If`: when no key of the batch is masked, ONNX
Runtime runs the node without a mask, where its CPU kernel is fastest (a batch of full windows, the usual case). The
rule itself is unchanged: masks, partner tiles and empty partner blocks are made by `attention_blockbert` as for
every kernel; only the product of a tile's queries with its keys is fused. A pattern whose mask depends on the query
(`"sparse_fixed"`) keeps the traced sdpa kernel.
"""

import contextlib
from collections.abc import Iterator

import onnx
import torch
from onnx import helper
from onnx.defs import OpSchema
from onnxscript import opset18 as op
from onnxscript.values import Opset
from transformers import AttentionInterface

from ..model import attention_blockbert


FUSED_ATTENTION = "onnx_multi_head_attention"
CONTRIB_DOMAIN = "com.microsoft"
FUSED_OP = "MultiHeadAttention"


@torch.library.custom_op("blockbert_hf::key_masked_attention", mutates_args=())
def key_masked_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_is_real: torch.Tensor, num_heads: int, scale: float
) -> torch.Tensor:
    """Attention of `(tiles, heads, block_len, head_dim)` queries over keys and values of the same shape, where the
    int32 `(tiles, block_len)` `key_is_real` is 1: `(tiles, block_len, heads * head_dim)`, the layout
    `MultiHeadAttention` returns."""
    mask = key_is_real[:, None, None, :].bool()
    output = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    return output.transpose(1, 2).flatten(2)


@key_masked_attention.register_fake
def _key_masked_attention_shape(query, key, value, key_is_real, num_heads, scale):
    return query.new_empty(query.shape[0], query.shape[2], num_heads * query.shape[3])


@contextlib.contextmanager
def _contrib_schema() -> Iterator[None]:
    """onnxscript builds a node only from an op schema that onnx knows, and ONNX Runtime's contrib ops are not among
    them: the inputs and attributes used here are declared while the graph is built, then withdrawn (onnx's checker
    would otherwise check later tools' nodes of this op against this partial schema)."""
    if onnx.defs.has(FUSED_OP, CONTRIB_DOMAIN):
        yield
        return
    parameter, optional = OpSchema.FormalParameter, OpSchema.FormalParameterOption.Optional
    onnx.defs.register_schema(
        OpSchema(
            FUSED_OP,
            CONTRIB_DOMAIN,
            1,
            inputs=[
                parameter("query", "T"),
                parameter("key", "T"),
                parameter("value", "T"),
                parameter("bias", "T", param_option=optional),
                parameter("key_padding_mask", "M", param_option=optional),
            ],
            outputs=[parameter("output", "T")],
            type_constraints=[("T", ["tensor(float)", "tensor(float16)"], ""), ("M", ["tensor(int32)"], "")],
            attributes=[
                OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "heads in the hidden dimension"),
                OpSchema.Attribute("scale", OpSchema.AttrType.FLOAT, "the scores' scaling"),
            ],
        )
    )
    try:
        yield
    finally:
        onnx.defs.deregister_schema(FUSED_OP, 1, CONTRIB_DOMAIN)


def _key_masked_attention_to_onnx(query, key, value, key_is_real, num_heads: int, scale: float):
    """The custom op as ONNX: tiles to `(tiles, block_len, heads * head_dim)`, then one `MultiHeadAttention`."""
    contrib = Opset(CONTRIB_DOMAIN, 1)
    hidden = op.Constant(value_ints=[0, 0, -1])
    query, key, value = (op.Reshape(op.Transpose(x, perm=[0, 2, 1, 3]), hidden) for x in (query, key, value))
    return contrib.MultiHeadAttention(query, key, value, None, key_is_real, num_heads=num_heads, scale=scale)


def _key_mask(mask: torch.Tensor | None, layout, device, dtype) -> torch.Tensor | None:
    """The kernel's mask form: int32 `(tiles, keys)`, 1 where a key may be attended (every group's mask of the
    patterns exported this way depends on the key only)."""
    if mask is None:
        return None
    return mask[:, 0, 0, :].to(torch.int32)


def _fused_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The attention interface of `FUSED_ATTENTION` (inference only: exported programs have no dropout)."""
    if attention_mask is None:
        attention_mask = torch.ones(query.shape[0], key.shape[2], dtype=torch.int32, device=query.device)
    scale = float(scaling if scaling is not None else query.shape[-1] ** -0.5)
    output = key_masked_attention(query, key, value, attention_mask, query.shape[1], scale)
    return output.unflatten(2, (query.shape[1], query.shape[3])), None


AttentionInterface.register(FUSED_ATTENTION, _fused_attention)
attention_blockbert.KERNEL_MASK_FORMS[FUSED_ATTENTION] = _key_mask
TRANSLATIONS = {torch.ops.blockbert_hf.key_masked_attention.default: _key_masked_attention_to_onnx}


def fuses_attention(config) -> bool:
    """Whether a model's attention is exported fused: its masks depend on the key only (blockwise and full)."""
    return config.attention_pattern in ("blockwise", "full")


@contextlib.contextmanager
def exported_attention(model: torch.nn.Module, fused: bool = True) -> Iterator[dict]:
    """Within the block, `model` computes attention with `FUSED_ATTENTION` (when `fused` and `fuses_attention`);
    yields the `custom_translation_table` that `torch.onnx.export` needs for it (empty otherwise)."""
    if not (fused and fuses_attention(model.config)):
        yield {}
        return
    kernel = model.config._attn_implementation
    model.config._attn_implementation = FUSED_ATTENTION
    try:
        with _contrib_schema():
            yield TRANSLATIONS
    finally:
        model.config._attn_implementation = kernel


# Names that mark what `skip_mask_when_all_keys_real` adds, so that `always_masked` can take it out again.
SWITCH_SUFFIX, CHECK_SUFFIX = "_if_all_keys_real", "_all_keys_real_check"


def skip_mask_when_all_keys_real(model: onnx.ModelProto) -> onnx.ModelProto:
    """Puts every masked `MultiHeadAttention` node of `model`'s graph and of its `If` branches in an `If` on whether
    its key padding mask has a 0: without one the node runs unmasked (ONNX Runtime's fastest CPU path, the same
    result). The mask's check is made once per distinct mask. `always_masked` undoes it."""
    _skip_mask_in(model.graph)
    return model


def always_masked(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` without what `skip_mask_when_all_keys_real` added (each masked node as it was), for the tools that do
    not look inside an `If` (ONNX Runtime's quantization would drop a value only a branch reads)."""
    nodes = []
    for node in model.graph.node:
        if node.name.endswith(CHECK_SUFFIX):
            continue
        if node.op_type == "If" and node.name.endswith(SWITCH_SUFFIX):
            branches = {attribute.name: attribute.g for attribute in node.attribute}
            masked = onnx.NodeProto()
            masked.CopyFrom(branches["else_branch"].node[0])
            masked.name, masked.output[:] = node.name.removesuffix(SWITCH_SUFFIX), list(node.output)
            node = masked
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _branch_output(name: str) -> onnx.ValueInfoProto:
    """An `If` branch's output: fp32 (the exported programs' precision), its shape left to ONNX Runtime."""
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)


def _skip_mask_in(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _skip_mask_in(attribute.g)
    checks: dict[str, str] = {}
    nodes = []
    for node in graph.node:
        masked_fused = node.op_type == FUSED_OP and node.domain == CONTRIB_DOMAIN and len(node.input) > 4
        if not masked_fused or not node.input[4]:
            nodes.append(node)
            continue
        mask, output = node.input[4], node.output[0]
        if mask not in checks:
            checks[mask] = f"{mask}_all_real"
            smallest, one = f"{mask}_smallest", f"{mask}_one"
            nodes += [
                helper.make_node("ReduceMin", [mask], [smallest], keepdims=0, name=smallest + CHECK_SUFFIX),
                helper.make_node(
                    "Constant",
                    [],
                    [one],
                    value=helper.make_tensor(one, onnx.TensorProto.INT32, [], [1]),
                    name=one + CHECK_SUFFIX,
                ),
                helper.make_node("Equal", [smallest, one], [checks[mask]], name=checks[mask] + CHECK_SUFFIX),
            ]
        unmasked = helper.make_node(
            FUSED_OP, list(node.input[:3]), [f"{output}_unmasked"], domain=CONTRIB_DOMAIN, name=f"{node.name}_unmasked"
        )
        masked = helper.make_node(
            FUSED_OP, list(node.input), [f"{output}_masked"], domain=CONTRIB_DOMAIN, name=f"{node.name}_masked"
        )
        for branch_node in (unmasked, masked):
            branch_node.attribute.extend(node.attribute)
        nodes.append(
            helper.make_node(
                "If",
                [checks[mask]],
                [output],
                name=node.name + SWITCH_SUFFIX,
                then_branch=helper.make_graph([unmasked], unmasked.name, [], [_branch_output(unmasked.output[0])]),
                else_branch=helper.make_graph([masked], masked.name, [], [_branch_output(masked.output[0])]),
            )
        )
    del graph.node[:]
    graph.node.extend(nodes)

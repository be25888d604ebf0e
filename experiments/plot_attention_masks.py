"""Pictures of BlockBERT's attention masks (which keys each query may attend), for the documentation: one panel per
shift, query position down, key position across.

    python experiments/plot_attention_masks.py

writes docs/figures/attention_mask_n2_10-2.png and docs/figures/attention_mask_n3_8-2-2.png (the paper's "10:2" and
"8:2:2" head splits over 24 tokens); docs/attention.md gives the rule.

The mask is read from what a tiny randomly initialised model actually attends, not recomputed from the rule, so the
picture shows the code's behaviour. matplotlib is imported only when a figure is drawn (it is in the `examples` and
`test` extras, not a dependency of the package).
"""

import logging
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from transformers import HfArgumentParser

from blockbert_experiments import option
from blockbert_hf.model.configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from blockbert_hf.model.modeling_blockbert import BlockBertModel, blockwise_attentions_to_dense
from blockbert_hf.saving import write_file_atomically
from blockbert_hf.train.runs import HelpFormatter


ATTENDED_COLOR = "#1f4e9c"
NOT_ATTENDED_COLOR = "#f0f0f0"


def _tiny_config(heads_per_shift: list[int], sequence_length: int) -> BlockBertConfig:
    """One layer, two dimensions per head, `N = sequence_length` (BERT positions), n = one block per shift."""
    num_heads = sum(heads_per_shift)
    return BlockBertConfig(
        vocab_size=16, hidden_size=2 * num_heads, num_hidden_layers=1, num_attention_heads=num_heads,
        intermediate_size=4, max_position_embeddings=sequence_length, position_embedding_style="bert",
        num_blocks=len(heads_per_shift), heads_per_shift=heads_per_shift,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip


def blockwise_attention_mask(heads_per_shift: str | list[int], sequence_length: int = 24) -> torch.Tensor:
    """`(heads, N, N)` boolean mask, True where the query (row) attends the key (column), read off a one-layer model's
    eager attention probabilities (nonzero: attended; with random weights every softmax entry is positive)."""
    counts = parse_heads_per_shift(heads_per_shift)
    if len(counts) < 1 or any(count < 0 for count in counts) or sum(counts) < 1:
        raise ValueError(
            f"heads_per_shift={heads_per_shift!r} needs one non-negative head count per shift and at least one head, "
            "e.g. '10:2' or '8:2:2'."
        )
    if sequence_length < len(counts):
        raise ValueError(
            f"sequence_length={sequence_length} is shorter than the {len(counts)} blocks of heads_per_shift="
            f"{heads_per_shift!r}: give every block at least one token."
        )
    config = _tiny_config(counts, sequence_length)
    with torch.random.fork_rng(devices=[]):  # a fixed seed here must not change the caller's random stream
        torch.manual_seed(0)
        model = BlockBertModel(config, add_pooling_layer=False).eval()
        input_ids = torch.randint(3, config.vocab_size, (1, sequence_length))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = model(input_ids=input_ids, output_attentions=True).attentions[0]
    return blockwise_attentions_to_dense(attentions, config, sequence_length)[0] != 0


def figure_file_name(heads_per_shift: str | list[int]) -> str:
    """`attention_mask_n2_10-2.png` for `"10:2"`, `attention_mask_n3_8-2-2.png` for `"8:2:2"`."""
    counts = parse_heads_per_shift(heads_per_shift)
    return f"attention_mask_n{len(counts)}_{'-'.join(str(count) for count in counts)}.png"


def plot_attention_masks(heads_per_shift: str | list[int], sequence_length: int = 24):
    """A matplotlib `Figure` with one panel per shift used by at least one head: that shift's mask (query on the y
    axis, key on the x axis, block boundaries drawn), titled with how many heads use it."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    counts = parse_heads_per_shift(heads_per_shift)
    mask = blockwise_attention_mask(counts, sequence_length)
    num_blocks, num_heads = len(counts), sum(counts)
    block_size = _tiny_config(counts, sequence_length).effective_block_size
    shifts = [shift for shift, count in enumerate(counts) if count > 0]

    figure = Figure(figsize=(3.3 * len(shifts) + 0.4, 4.7), layout="constrained")
    axes = figure.subplots(1, len(shifts), squeeze=False)[0]
    colormap = ListedColormap([NOT_ATTENDED_COLOR, ATTENDED_COLOR])
    boundaries = [block * block_size - 0.5 for block in range(1, num_blocks) if block * block_size < sequence_length]
    block_starts = list(range(0, sequence_length, block_size))
    for ax, shift in zip(axes, shifts):
        ax.imshow(mask[sum(counts[:shift])].numpy(), cmap=colormap, vmin=0, vmax=1, interpolation="nearest")
        # A faint line between tokens, a strong one between blocks.
        token_edges = [position - 0.5 for position in range(1, sequence_length)]
        ax.set_xticks(token_edges, minor=True)
        ax.set_yticks(token_edges, minor=True)
        ax.grid(which="minor", color="white", linewidth=0.4)
        ax.tick_params(which="minor", length=0)
        for boundary in boundaries:
            ax.axhline(boundary, color="#d62728", linewidth=1.2)
            ax.axvline(boundary, color="#d62728", linewidth=1.2)
        ax.set(xticks=block_starts, yticks=block_starts, xlabel="key position", ylabel="query position")
        heads = "head" if counts[shift] == 1 else "heads"
        rule = f"query block i → key block (i+{shift}) mod {num_blocks}"
        ax.set_title(f"shift {shift}: {counts[shift]} of {num_heads} {heads}\n{rule}", fontsize=9)
    notation = ":".join(str(count) for count in counts)
    figure.suptitle(
        f'BlockBERT n={num_blocks}, "{notation}": {sequence_length} tokens in blocks of {block_size}', fontsize=10
    )
    handles = [
        Patch(facecolor=ATTENDED_COLOR, label="attended"),
        Patch(facecolor=NOT_ATTENDED_COLOR, edgecolor="#999999", label="masked"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return figure


@dataclass
class PlotArguments:
    heads_per_shift: list[str] = option(["10:2", "8:2:2"], "one figure per head split, in the paper's notation")
    sequence_length: int = option(24, "tokens shown (N of the tiny model drawn)")
    output_dir: str = option("docs/figures", "where the PNG files go")


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(PlotArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    parser = build_parser()
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    for heads_per_shift in args.heads_per_shift:
        try:
            figure = plot_attention_masks(heads_per_shift, args.sequence_length)
        except ValueError as error:
            parser.error(str(error))
        path = Path(args.output_dir) / figure_file_name(heads_per_shift)
        # Written atomically, with no software version in the PNG: redrawing an unchanged picture gives the same file.
        write_file_atomically(path, partial(figure.savefig, format="png", dpi=150, metadata={"Software": None}))
        logging.info(f"Wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

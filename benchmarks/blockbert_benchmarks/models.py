"""The models the benchmarks compare: BlockBERT (blockwise and full), transformers' RoBERTa, Longformer and BigBird, all
built at one size with random weights, and the sharing of one set of weights between models of the same shapes."""

from dataclasses import dataclass

import torch

from blockbert_hf import BlockBertConfig, BlockBertForMaskedLM, BlockBertModel


def bert_base_config(max_sequence_length: int, **overrides) -> BlockBertConfig:
    """BERT-base dimensions (12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522) with RoBERTa positions."""
    fields = dict(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=max_sequence_length + 2,
    )
    fields.update(overrides)
    return BlockBertConfig(**fields)


@dataclass(frozen=True)
class Candidate:
    """One model of the comparison. `family`: "blockbert" (this package; `num_blocks=1` is its full-attention pattern,
    the paper's RoBERTa-1seq), "roberta" (transformers' RobertaModel), "longformer", "bigbird" (transformers' classes,
    whose attention has only an eager implementation). `sparse_prediction` (BlockBERT only) runs the MLM head on the
    labelled positions alone, as fairseq (the paper's code base) does; its full-attention form is the fair anchor for
    its blockwise forms, since the same head saving would apply to RoBERTa."""

    family: str
    attn_implementation: str = "eager"
    num_blocks: int = 1
    sparse_prediction: bool = False

    @property
    def key(self) -> str:
        if self.family == "blockbert":
            blocks = "full" if self.num_blocks == 1 else f"n{self.num_blocks}"
            sparse = "-sparse" if self.sparse_prediction else ""
            return f"blockbert-{blocks}-{self.attn_implementation}{sparse}"
        if self.family == "roberta":
            return f"roberta-{self.attn_implementation}"
        return self.family

    @property
    def label(self) -> str:
        if self.family == "blockbert":
            blocks = "full" if self.num_blocks == 1 else f"n={self.num_blocks}"
            sparse = ", masked-only MLM logits" if self.sparse_prediction else ""
            return f"BlockBERT {blocks} ({self.attn_implementation}{sparse})"
        return {"roberta": "RoBERTa", "longformer": "Longformer", "bigbird": "BigBird"}[self.family] + (
            f" ({self.attn_implementation})"
        )


CANDIDATES = {
    candidate.key: candidate
    for candidate in [
        *(Candidate("blockbert", kernel, n) for n in (2, 3, 4) for kernel in ("eager", "sdpa")),
        Candidate("blockbert", "eager", 1),
        Candidate("blockbert", "sdpa", 1),
        *(Candidate("blockbert", "sdpa", n, sparse_prediction=True) for n in (1, 2, 3)),
        # torch's flex_attention kernel, compiled on first use; transformers runs it without attention dropout.
        Candidate("blockbert", "flex_attention", 2),
        Candidate("roberta", "eager"),
        Candidate("roberta", "sdpa"),
        Candidate("longformer"),
        Candidate("bigbird"),
    ]
}


def parse_candidates(keys: list[str] | str) -> list[Candidate]:
    """`["blockbert-n2-sdpa", "roberta-eager", ...]` (or one comma-separated string) -> candidates, in that order."""
    if isinstance(keys, str):
        keys = [key for key in keys.split(",") if key]
    unknown = [key for key in keys if key not in CANDIDATES]
    if unknown or not keys:
        raise ValueError(f"Unknown model keys {unknown or keys}: choose among {', '.join(CANDIDATES)}.")
    return [CANDIDATES[key] for key in keys]


@dataclass(frozen=True)
class ModelSize:
    """Dimensions shared by every candidate (BERT-base by default; `tiny()` for quick runs and tests)."""

    num_layers: int = 12
    hidden_size: int = 768
    num_heads: int = 12
    intermediate_size: int = 3072
    vocab_size: int = 30522
    longformer_window: int = 512
    bigbird_block_size: int = 64
    bigbird_random_blocks: int = 3

    def describe(self) -> str:
        return (
            f"{self.num_layers} layers, hidden {self.hidden_size}, {self.num_heads} heads, FFN "
            f"{self.intermediate_size}, vocab {self.vocab_size}"
        )

    @classmethod
    def tiny(cls) -> "ModelSize":
        return cls(
            num_layers=2,
            hidden_size=64,
            num_heads=4,
            intermediate_size=128,
            vocab_size=512,
            longformer_window=32,
            bigbird_block_size=16,
            bigbird_random_blocks=1,
        )


BERT_BASE = ModelSize()


def other_families_note(size: ModelSize) -> str:
    """How Longformer and BigBird are configured, for the notes of a results file."""
    return (
        f"Longformer: window {size.longformer_window}, no global attention. BigBird: block sparse, block "
        f"{size.bigbird_block_size}, {size.bigbird_random_blocks} random blocks (it switches to full attention for "
        f"inputs of at most {(5 + 2 * size.bigbird_random_blocks) * size.bigbird_block_size} tokens)."
    )


def build_benchmark_model(
    candidate: Candidate,
    seq_len: int,
    size: ModelSize = BERT_BASE,
    masked_lm: bool = False,
    attention_dropout: float = 0.1,
    hidden_dropout: float = 0.1,
) -> torch.nn.Module:
    """A randomly initialised `*Model` (or `*ForMaskedLM` when `masked_lm`) of `candidate` for inputs of up to
    `seq_len` tokens, every family at the same dimensions."""
    if candidate.sparse_prediction and candidate.family != "blockbert":
        raise ValueError("sparse_prediction is a BlockBERT option; transformers' other models have no such switch.")
    if candidate.family in ("longformer", "bigbird") and candidate.attn_implementation != "eager":
        raise ValueError(f"{candidate.family} has only an eager attention implementation in transformers.")
    if candidate.attn_implementation == "flex_attention":
        attention_dropout = 0.0  # transformers' flex_attention refuses attention dropout
    common = dict(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        intermediate_size=size.intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=hidden_dropout,
        attention_probs_dropout_prob=attention_dropout,
        max_position_embeddings=seq_len + 2,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
    )
    # transformers' classes are imported where used: a measuring process loads only the family it builds.
    if candidate.family == "blockbert":
        pattern = "full" if candidate.num_blocks == 1 else "blockwise"
        config = bert_base_config(
            seq_len,
            **common,
            attention_pattern=pattern,
            num_blocks=candidate.num_blocks,
            sparse_prediction=candidate.sparse_prediction,
        )
        model = BlockBertForMaskedLM(config) if masked_lm else BlockBertModel(config, add_pooling_layer=False)
    elif candidate.family == "roberta":
        from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

        config = RobertaConfig(**common)
        model = RobertaForMaskedLM(config) if masked_lm else RobertaModel(config, add_pooling_layer=False)
    elif candidate.family == "longformer":
        from transformers import LongformerConfig, LongformerForMaskedLM, LongformerModel

        config = LongformerConfig(**common, attention_window=size.longformer_window)
        model = LongformerForMaskedLM(config) if masked_lm else LongformerModel(config, add_pooling_layer=False)
    elif candidate.family == "bigbird":
        from transformers import BigBirdConfig, BigBirdForMaskedLM, BigBirdModel

        config = BigBirdConfig(
            **common,
            attention_type="block_sparse",
            block_size=size.bigbird_block_size,
            num_random_blocks=size.bigbird_random_blocks,
        )
        model = BigBirdForMaskedLM(config) if masked_lm else BigBirdModel(config, add_pooling_layer=False)
    else:
        raise ValueError(
            f"Unknown model family {candidate.family!r}: use one of blockbert, roberta, longformer, bigbird."
        )
    if candidate.family in ("blockbert", "roberta"):
        model.set_attn_implementation(candidate.attn_implementation)
    return model


def attention_actually_used(model: torch.nn.Module) -> str | None:
    """BigBird silently switches from block-sparse to full attention for inputs of at most
    `(5 + 2 * num_random_blocks) * block_size` tokens; this says which one the last forward ran (None for other
    models)."""
    base = getattr(model, "base_model", model)
    return getattr(base, "attention_type", None) if type(base).__name__.startswith("BigBird") else None


def share_parameters(donor: torch.nn.Module, recipient: torch.nn.Module) -> None:
    """Makes `recipient` use `donor`'s parameter objects, name by name (models of the same architecture, e.g. a
    BlockBERT and a RoBERTa of the same size), so that timing many models in one process holds one copy of weights,
    gradients and optimizer state. Raises if the two do not have the same parameter names and shapes."""
    donated = dict(donor.named_parameters(remove_duplicate=False))
    own = dict(recipient.named_parameters(remove_duplicate=False))
    mismatched = sorted(set(donated) ^ set(own)) + [
        name for name in own if name in donated and own[name].shape != donated[name].shape
    ]
    if mismatched:
        raise ValueError(f"Cannot share parameters: names or shapes differ at {mismatched[:5]}.")
    for name, parameter in donated.items():
        module_name, _, attribute = name.rpartition(".")
        setattr(recipient.get_submodule(module_name), attribute, parameter)


def build_models_sharing_weights(
    candidates: list[Candidate], seq_len: int, size: ModelSize, device, dtype: str = "float32", **build_kwargs
) -> dict[str, torch.nn.Module]:
    """`build_benchmark_model` for every candidate, on `device` with weights in `dtype`; the BlockBERT and RoBERTa
    models (same parameter names and shapes) all use the first one's parameter objects, so a process timing a dozen of
    them holds one copy of the weights."""
    models, donor = {}, None
    for candidate in candidates:
        model = build_benchmark_model(candidate, seq_len, size, **build_kwargs)
        model = model.to(device=device, dtype=getattr(torch, dtype))
        if candidate.family in ("blockbert", "roberta"):
            if donor is None:
                donor = model
            else:
                share_parameters(donor, model)
        models[candidate.key] = model
    return models

"""The errors of the converter: each message says what was wrong and how to fix it."""


class ConversionError(ValueError):
    """A checkpoint or option that cannot be converted; the message says what was wrong and what to do."""


class TokenizerError(ConversionError):
    """The source has no usable tokenizer of its own (e.g. a folder without tokenizer files, for which transformers
    builds a stand-in that knows only the special tokens): the conversion cannot be verified on real text, and the
    tokenizer would be useless to save with the model."""

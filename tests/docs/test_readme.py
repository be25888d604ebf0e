"""README.md's Python blocks run, and so do those of docs/export.md (after README's), so that the usage they show
cannot go stale.

Every ```python block runs, in README order, in one shared namespace (like a doctest session), in a fresh temporary
folder that holds a link `data` to the repository's `data/` (as a clone's root would), with HF_HUB_OFFLINE=1. A block
may use what earlier blocks defined; any folder or name it uses must be made by a block of the README. Tiny sizes:
while the blocks run, `BlockBertConfig` gets small defaults for the size fields a block does not pass: hidden_size =
4 x num_attention_heads, num_hidden_layers = 2, intermediate_size = 2 x hidden_size. Every value a block passes (heads,
N, n, heads_per_shift, ...) is kept, and so is the vocabulary size, so that any tokenizer fits. A block that exports to
ONNX runs with the slow checks only (`pytest -m slow tests/docs/test_readme.py`); no later block
may need what it defines.

The README's shell commands are checked by `test_page_commands.py`, its figures by `test_page_figures.py`.
"""

import contextlib
import functools
import traceback
from pathlib import Path

import pytest
from page_checks import README, REPO_ROOT, Block, fenced_blocks

from blockbert_hf import BlockBertConfig


README_TEXT = README.read_text()

# ---------------------------------------------------------------------------------------------------------------------
# Python blocks
# ---------------------------------------------------------------------------------------------------------------------


def with_tiny_sizes(original_init):
    """`BlockBertConfig.__init__` with the tiny-size defaults of the module docstring."""
    default_heads = BlockBertConfig.__dataclass_fields__["num_attention_heads"].default

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        kwargs.setdefault("hidden_size", 4 * kwargs.get("num_attention_heads", default_heads))
        kwargs.setdefault("num_hidden_layers", 2)
        kwargs.setdefault("intermediate_size", 2 * kwargs["hidden_size"])
        original_init(self, *args, **kwargs)

    return init


def is_slow(block: Block) -> bool:
    return "onnx" in block.code.lower()


class ReadmeSession:
    """The Python blocks run one after the other in one namespace. A test may ask for any block: the blocks before it
    that have not run yet run first (except slow ones), so that `-k` can pick a single block. `pages` names the page
    of each block (README.md for all by default)."""

    def __init__(self, blocks: list[Block], folder: Path, pages: list[Path] | None = None):
        self.blocks, self.folder = blocks, folder
        self.pages = pages or [README] * len(blocks)
        self.namespace = {"__name__": "__readme__"}
        self.next = 0
        self.failed: list[Block] = []

    def run(self, index: int) -> None:
        for earlier in self.blocks[self.next : index]:
            if not is_slow(earlier):
                with contextlib.suppress(pytest.fail.Exception):  # recorded in self.failed
                    self._execute(earlier)
        self.next = max(self.next, index + 1)
        block = self.blocks[index]
        if self.failed:
            failed = self.failed[0]
            pytest.fail(
                f"{self._name(block)}:{block.line} ({block.first_line!r}) did not run: the block at "
                f"{self._name(failed)}:{failed.line} ({failed.first_line!r}) failed before it",
                pytrace=False,
            )
        self._execute(block)

    def _name(self, block: Block) -> str:
        return self.pages[self.blocks.index(block)].relative_to(REPO_ROOT).as_posix()

    def _execute(self, block: Block) -> None:
        page = self.pages[self.blocks.index(block)]
        # Padding with blank lines makes the code's line numbers the page's: tracebacks point at the page.
        code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(self.folder)
            patch.setenv("HF_HUB_OFFLINE", "1")
            patch.setattr(BlockBertConfig, "__init__", with_tiny_sizes(BlockBertConfig.__init__))
            try:
                exec(code, self.namespace)
            except Exception as error:
                self.failed.append(block)
                frames = traceback.extract_tb(error.__traceback__)
                first = next((i for i, frame in enumerate(frames) if frame.filename == str(page)), 0)
                where = next((frame.lineno for frame in reversed(frames) if frame.filename == str(page)), block.line)
                pytest.fail(
                    f"{self._name(block)}:{where} (in the block at line {block.line}, {block.first_line!r}) raised "
                    f"{type(error).__name__}: {error}\n\n"
                    + "".join(traceback.format_list(frames[first:]) + traceback.format_exception_only(error)),
                    pytrace=False,
                )


PYTHON_BLOCKS = [block for block in fenced_blocks(README_TEXT) if block.language == "python"]


@pytest.fixture(scope="module")
def readme_session(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    (folder / "data").symlink_to(REPO_ROOT / "data", target_is_directory=True)
    return ReadmeSession(PYTHON_BLOCKS, folder)


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(index, marks=[pytest.mark.slow] if is_slow(block) else [], id=f"README.md:{block.line}")
        for index, block in enumerate(PYTHON_BLOCKS)
    ],
)
def test_python_block_runs(index, readme_session):
    readme_session.run(index)


EXPORT_PAGE = REPO_ROOT / "docs" / "export.md"
EXPORT_BLOCKS = [block for block in fenced_blocks(EXPORT_PAGE.read_text()) if block.language == "python"]


@pytest.fixture(scope="module")
def export_session(tmp_path_factory):
    """README's blocks, then docs/export.md's, in one namespace: the export page goes on from the README's model."""
    folder = tmp_path_factory.mktemp("export")
    (folder / "data").symlink_to(REPO_ROOT / "data", target_is_directory=True)
    pages = [README] * len(PYTHON_BLOCKS) + [EXPORT_PAGE] * len(EXPORT_BLOCKS)
    return ReadmeSession(PYTHON_BLOCKS + EXPORT_BLOCKS, folder, pages)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(EXPORT_BLOCKS)), ids=[f"docs/export.md:{b.line}" for b in EXPORT_BLOCKS])
def test_export_page_block_runs(index, export_session):
    export_session.run(len(PYTHON_BLOCKS) + index)


def test_tiny_sizes_keep_what_a_block_passes():
    tiny = with_tiny_sizes(BlockBertConfig.__init__)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BlockBertConfig, "__init__", tiny)
        config = BlockBertConfig(num_attention_heads=4, max_position_embeddings=66, heads_per_shift="3:1")
        explicit = BlockBertConfig(hidden_size=96, num_hidden_layers=3)
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (16, 2, 32)
    assert (config.num_attention_heads, config.max_sequence_length, config.heads_per_shift) == (4, 64, [3, 1])
    assert config.vocab_size == 50265
    assert (explicit.hidden_size, explicit.num_hidden_layers, explicit.intermediate_size) == (96, 3, 192)
    assert BlockBertConfig().hidden_size == 768  # only while the blocks run


def test_a_failing_block_is_named_by_its_readme_line(tmp_path):
    blocks = [Block("python", 40, "x = 1"), Block("python", 50, "y = x\nz = y / 0")]
    session = ReadmeSession(blocks, tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"README.md:51 \(in the block at line 50, 'y = x'\).*Division"):
        session.run(1)
    with pytest.raises(pytest.fail.Exception, match="did not run: the block at README.md:50"):
        ReadmeSession([*blocks, Block("python", 60, "pass")], tmp_path).run(2)

"""The command-line options the benchmark scripts share: threads, device, output folder, memory budget, in-process and
quick runs (every script), and the grid, models and rounds of the many-model comparisons (`inference.py`,
`train_step.py`)."""

import tempfile
from pathlib import Path

import torch

from blockbert_benchmarks.measuring.memory import GIB, available_memory_bytes

from .models import ModelSize, parse_candidates


def parse_grid(text: str) -> list[tuple[int, int]]:
    """`"8x1024,2x4096"` -> [(8, 1024), (2, 4096)] (batch size x sequence length)."""
    grid = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise ValueError(
                f"Grid item {item!r} is not BATCHxLENGTH: write positive integers such as '8x1024,2x4096'."
            )
        grid.append((int(parts[0]), int(parts[1])))
    return grid


def add_run_arguments(parser, default_output_dir) -> None:
    """The options every efficiency benchmark takes."""
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default 2, the thread count the CPU targets are stated for; 1 with --quick, whose tiny "
        "operations only wait on each other with more)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--output_dir",
        help=f"folder for the .json, .md and .png results (default: {default_output_dir}; with --quick a new "
        "temporary folder, so that a quick run never overwrites real results)",
    )
    parser.add_argument(
        "--memory_budget_gb",
        type=float,
        help="CPU: the most memory one measurement may take above an idle Python process; a measurement that needs "
        "more is recorded as out of memory (default: 90%% of the memory available when the run starts)",
    )
    parser.add_argument(
        "--in_process",
        action="store_true",
        help="measure memory in this process instead of a fresh process per measurement (faster, but a measurement "
        "that exhausts memory can take the whole run down; --quick implies it)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works, in seconds")


def prepare_run(args, default_output_dir) -> Path:
    """Checks the common options, sets the thread count, and returns the output folder (created)."""
    if args.threads is None:
        args.threads = 1 if args.quick else 2
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}.")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but torch sees no CUDA device: use --device cpu.")
    if args.memory_budget_gb is not None and args.memory_budget_gb <= 0:
        raise ValueError(f"--memory_budget_gb must be positive, got {args.memory_budget_gb}.")
    torch.set_num_threads(args.threads)
    if args.quick:
        args.in_process = True
    args.memory_budget_bytes = None
    if args.device == "cpu":  # an address-space cap would break CUDA's large virtual mappings
        available = available_memory_bytes()
        if args.memory_budget_gb is not None:
            args.memory_budget_bytes = int(args.memory_budget_gb * GIB)
        elif available is not None:
            args.memory_budget_bytes = int(0.9 * available)
    if args.output_dir is None:
        args.output_dir = tempfile.mkdtemp(prefix="blockbert-benchmark-quick-") if args.quick else default_output_dir
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def add_comparison_arguments(
    parser, default_output_dir, default_grid: str, default_models: str, too_slow_s: float, call: str
) -> None:
    """The options of inference.py and train_step.py (`call`: "forward" or "step", for the help texts)."""
    parser.add_argument("--grid", default=default_grid, help="comma-separated BATCHxLENGTH")
    parser.add_argument("--models", default=default_models, help="comma-separated model keys")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--longformer_window", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (at least 5 for the targets)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--too_slow_s", type=float, default=too_slow_s, help=f"a model whose {call} takes longer: not timed"
    )
    parser.add_argument("--skip_timing", action="store_true", help="measure memory only (no timing pass)")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="bfloat16: a training step runs under bf16 autocast (fp32 weights and AdamW state, as Trainer's --bf16), "
        "a forward with its weights in bf16",
    )
    add_run_arguments(parser, default_output_dir)


def check_comparison_arguments(parser, args) -> None:
    """Parses and checks what `add_comparison_arguments` added (errors through `parser.error`); --quick shrinks the
    grid and the rounds."""
    if args.quick:
        args.grid, args.repeats, args.warmup = "1x128", 2, 1
    try:
        args.grid = parse_grid(args.grid)
        args.candidates = parse_candidates(args.models)
    except ValueError as error:
        parser.error(str(error))
    if args.repeats < 1 or args.warmup < 0 or args.layers < 1:
        parser.error("--repeats and --layers must be at least 1, --warmup at least 0")
    if args.longformer_window < 2 or args.longformer_window % 2:
        parser.error(f"--longformer_window must be an even number (Longformer's rule), got {args.longformer_window}")


def comparison_size(args) -> ModelSize:
    """The model size of a comparison run: tiny with --quick, else BERT-base with --layers and --longformer_window."""
    if args.quick:
        return ModelSize.tiny()
    return ModelSize(num_layers=args.layers, longformer_window=args.longformer_window)

"""The harness of the benchmark scripts in `benchmarks/` (not part of the installed `blockbert_hf` package).

- `models`: the compared models (`Candidate`, `CANDIDATES`, `ModelSize`) and building them with shared weights.
- `workloads`: the inputs and the training step that are measured.
- `measurements`: memory of one forward or one training step, the functions run in a fresh process each.
- `profiling`: where the time of one forward or training step goes, per group of aten ops.
- `isolation`: running a measurement in a fresh process, with a memory budget and a timeout.
- `anchors`: the models ratios are taken against, and the timing pass that reports them.
- `comparison`: one grid point of a many-model comparison (memory pass, then timing pass).
- `arguments`: the command-line options the scripts share.
- `reporting`: results headers, markdown tables, targets, plots and the results files.
- `measuring`: peak memory of a block of code, interleaved same-run timing, the machine line (the demo uses it too).

The scripts run as `python benchmarks/SCRIPT.py`, which puts `benchmarks/` on `sys.path`; the tests find this package
through pytest's `pythonpath` setting.
"""

"""Measuring speed and memory on a shared machine: the peak memory of a block of code (`memory`) and interleaved,
same-run timing ratios (`timing`). Used by the demo and by the benchmarks in `benchmarks/`."""

"""The machine a measurement ran on, as one line recorded with every results file."""

import os
import platform

import torch
import transformers


def machine_description() -> str:
    """CPU model, cores, threads used, memory, GPU and library versions: the line each results file starts with."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            memory = f", {int(meminfo.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return (
        f"{cpu} ({os.cpu_count()} logical CPUs visible, torch uses {torch.get_num_threads()} threads){memory}{gpu}; "
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )

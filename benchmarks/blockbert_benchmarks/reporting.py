"""The results files: the header every results markdown starts with (command, date, machine), markdown tables, the
comparison and targets tables of `inference.py` and `train_step.py`, their plot, and the `.json`/`.md`/`.png` they
write (atomically, with `blockbert_hf.saving`). Commands and paths are recorded as `measuring.machine` records them:
relative to the repository, never as folders of the machine that ran them."""

import datetime
import json
import sys
from pathlib import Path

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command, recorded_path
from blockbert_benchmarks.measuring.memory import GIB
from blockbert_benchmarks.measuring.timing import median_paired_ratio
from blockbert_hf.saving import write_file_atomically

from .anchors import pick_anchors
from .models import CANDIDATES, Candidate


def gib(num_bytes: float | None) -> str:
    return "" if num_bytes is None else f"{num_bytes / GIB:.3f}"


def markdown_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def results_header(title: str, script: str, argv: list[str], notes: list[str]) -> str:
    """Title, the command that produced the file (`recorded_command`), date, machine, and notes: the top of every
    results markdown."""
    command = recorded_command(["python", script, *argv])
    lines = [
        f"# {title}",
        "",
        f"Produced by `{command}` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        f"Machine: {machine_description()}.",
        "",
    ]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n\n"


def comparison_table(candidates: list[Candidate], rows: dict, memory_field: str, memory_title: str) -> str:
    """One markdown table: status, memory, median time and same-run ratios to the anchors, per candidate."""
    anchors = pick_anchors([key for key, row in rows.items() if row.get("median_s") is not None])
    memory_anchor = next((a for a in pick_anchors(list(rows)) if rows[a].get(memory_field) is not None), None)
    headers = ["model", memory_title, "median time (s)"]
    headers += [f"time / {CANDIDATES[a].label} (paired; of medians)" for a in anchors]
    headers += [f"memory / {CANDIDATES[memory_anchor].label}"] if memory_anchor else []
    headers += ["note"]
    table = []
    for candidate in candidates:
        row = rows[candidate.key]
        cells = [candidate.label, gib(row.get(memory_field))]
        cells.append(f"{row['median_s']:.3f}" if row.get("median_s") is not None else "")
        for anchor in anchors:
            ratio = row.get("ratios", {}).get(anchor)
            cells.append(f"{ratio['median_paired_ratio']:.3f}; {ratio['ratio_of_medians']:.3f}" if ratio else "")
        if memory_anchor:
            mine, theirs = row.get(memory_field), rows[memory_anchor][memory_field]
            cells.append(f"{mine / theirs:.3f}" if mine is not None else "")
        note = "" if row["status"] == "ok" else row["status"] + (f" ({row['detail']})" if row.get("detail") else "")
        if row.get("attention_used") == "original_full":
            note = (note + "; " if note else "") + "BigBird ran full attention (input too short for block sparse)"
        cells.append(note)
        table.append(cells)
    return markdown_table(headers, table)


def targets_table(targets: list[dict], sections: list[dict]) -> str:
    """The performance targets, each with the same-run ratio measured here (median of paired rounds) and whether it
    holds. A target is `{"what", "section": {field: value, ...}, "model", "anchor", "at_most",
    "kind": "time" | "memory", "memory_field"}`."""
    table = []
    for target in targets:
        section = next((s for s in sections if all(s.get(k) == v for k, v in target["section"].items())), None)
        measured = None
        if section is not None and target["model"] in section["rows"] and target["anchor"] in section["rows"]:
            row, anchor = section["rows"][target["model"]], section["rows"][target["anchor"]]
            # Any two models timed in the same run pair up, whether or not the tables show ratios to the anchor.
            if target["kind"] == "time" and row.get("times_s") and anchor.get("times_s"):
                measured = median_paired_ratio(row["times_s"], anchor["times_s"])
            elif target["kind"] == "memory" and row.get(target["memory_field"]) and anchor.get(target["memory_field"]):
                measured = row[target["memory_field"]] / anchor[target["memory_field"]]
        verdict = "not measured" if measured is None else ("yes" if measured <= target["at_most"] else "NO")
        table.append(
            [
                target["what"],
                f"{CANDIDATES[target['model']].label} / {CANDIDATES[target['anchor']].label}",
                f"<= {target['at_most']}",
                "" if measured is None else f"{measured:.3f}",
                verdict,
            ]
        )
    return markdown_table(["target", "ratio", "required", "measured", "met"], table)


def comparison_plot(sections: list[dict], candidates: list[Candidate], memory_field: str, title: str, path) -> None:
    """Grouped bars, one group per section (grid point): median time (top) and peak memory (bottom)."""
    import matplotlib  # only the scripts that plot need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axes, memory_axes) = plt.subplots(2, 1, figsize=(max(9, 2.2 * len(sections) + 6), 8), sharex=True)
    width = 0.8 / max(1, len(candidates))
    for index, candidate in enumerate(candidates):
        xs = [group + (index - (len(candidates) - 1) / 2) * width for group in range(len(sections))]
        times = [s["rows"][candidate.key].get("median_s") or 0.0 for s in sections]
        memory = [(s["rows"][candidate.key].get(memory_field) or 0.0) / GIB for s in sections]
        color = plt.get_cmap("tab20")(index % 20)  # a dozen models: more than the default cycle's 10 colours
        hatch = "//" if candidate.attn_implementation == "sdpa" else None
        time_axes.bar(xs, times, width, label=candidate.label, color=color, hatch=hatch)
        memory_axes.bar(xs, memory, width, color=color, hatch=hatch)
    time_axes.set_ylabel("median time (s)")
    memory_axes.set_ylabel("peak memory (GiB)")
    memory_axes.set_xticks(range(len(sections)), [s["name"] for s in sections])
    time_axes.set_title(title + " (missing bar: out of memory, too slow, or not run)")
    time_axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for axes in (time_axes, memory_axes):
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    write_file_atomically(path, lambda temporary: figure.savefig(temporary, format="png", dpi=120))
    plt.close(figure)


def print_and_write(results: dict, markdown: str, json_path: str | None, markdown_path: str | None) -> None:
    """Prints the markdown report, and writes it and the results (JSON) to the paths given, each atomically."""
    print(markdown)
    for path, text in ((json_path, json.dumps(results, indent=2)), (markdown_path, markdown)):
        if path:
            write_file_atomically(path, text)


def measuring_arguments(argv: list[str]) -> list[str]:
    """The command line without the options that only say where results go (shown with the results)."""
    shown, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--output", "--markdown"):
            skip = True
        elif not word.startswith(("--output=", "--markdown=")):
            shown.append(word)
    return shown


def run_arguments(args) -> dict:
    """The parsed arguments as a results file records them: the parsed candidates by their keys (`models`), the output
    folder as `recorded_path` records it."""
    recorded = {key: value for key, value in vars(args).items() if key != "candidates"}
    if recorded.get("output_dir") is not None:
        recorded["output_dir"] = recorded_path(recorded["output_dir"])
    return recorded


def write_report(
    output_dir: Path,
    stem: str,
    header: str,
    targets: list[dict],
    sections: list[dict],
    args,
    memory_title: str,
    plot_title: str,
) -> int:
    """Writes `{stem}.json`, `{stem}.md` (the targets table first, for BERT-base runs) and `{stem}.png`; prints the
    markdown; returns 1 when a measurement failed, else 0."""
    text = header
    if not args.quick and args.layers == 12:  # the targets are stated for BERT-base
        text += "## Targets (BlockBERT with the sdpa kernel)\n\n" + targets_table(targets, sections) + "\n"
    for section in sections:
        text += f"## {section['name']}\n\n"
        text += comparison_table(args.candidates, section["rows"], "peak_bytes", memory_title)
        text += "\n"
    write_file_atomically(
        output_dir / f"{stem}.json",
        json.dumps({"args": run_arguments(args), "sections": sections}, indent=2, default=str),
    )
    write_file_atomically(output_dir / f"{stem}.md", text)
    comparison_plot(sections, args.candidates, "peak_bytes", plot_title, output_dir / f"{stem}.png")
    print(text)
    print(f"wrote {output_dir}/{stem}.{{json,md,png}}")
    failed = [key for s in sections for key, row in s["rows"].items() if row["status"] in ("error", "timing failed")]
    if failed:
        print(f"measurements failed: {failed} (see the .md file)", file=sys.stderr)
        return 1
    return 0

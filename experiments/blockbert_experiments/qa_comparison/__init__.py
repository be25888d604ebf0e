"""The fine-tuning comparison on long-context QA: one pretrained encoder converted to BlockBERT in several attention
configurations (the grid of `GRID`: full attention, the sparse "fixed" pattern and blockwise n = 2, 3 at N = 512,
BlockBERT at N = 1024 and 2048), each fine-tuned with the recipe chosen on the dev articles (`RECIPE_GRID`,
`EPOCHS_GRID`, `LAYOUT_GRID`; `apply_recipe_choice`) and evaluated on the test sets of
`blockbert_experiments.long_context`.

`run_comparison` works through the cells in priority order and can be stopped at any time: a converted model is cached
and reused, a finished training or evaluation is skipped, an interrupted training resumes from its last checkpoint and
an interrupted evaluation redoes only the sets without results. Every step runs the repository's own scripts
(`examples/convert_roberta_to_blockbert.py`, `examples/run_qa.py`) as a fresh process, so the exact commands can be
recorded and the peak memory of each evaluation is that process's own high-water mark. Large files (models,
checkpoints, predictions) go to the work folder; small result files go to the results folder:
`<cell>/results.json` (EM/F1 per set, eval time and memory, train time, commands) and `<cell>/scores.json`
(per-question EM/F1, aligned with `questions.json`).

`write_report` turns whatever cells have results into the results table, the F1-vs-context-length plot, 95% intervals
of each cell's difference to the baseline from a paired bootstrap that resamples articles, the seed-averaged
differences with a t-interval over seeds, the seed spread, and the recipe and commands the cells' records give.

Modules: `grid` (the cells and the recipe), `layout` (where inputs and files are), `plan` (time estimates, the dry-run
table), `steps` (the scripts' arguments, running one step), `runner` (the resumable run, results files and the command
line of `experiments/qa_comparison.py`), `scores` (per-question scores, the paired article bootstrap, the t-interval
over seeds), `provenance` (the recipe, commands and notes on the data from the cells' records), `report` (tables, plot,
README).
"""

"""The fine-tuning comparison on long-context QA: one pretrained encoder converted to BlockBERT in several attention
configurations (`GRID`), each fine-tuned with the recipe chosen on the dev articles (`apply_recipe_choice`) and
evaluated on the test sets of `blockbert_experiments.long_context`.

`run_comparison` works through the cells in priority order and resumes where it stopped; every step runs the
repository's own scripts as a fresh process, so its command is recorded. `write_report` turns whatever cells have
results into the report (results/qa_comparison/README.md).

Modules: `grid` (cells, recipe), `layout` (paths), `plan` (estimates, dry run), `steps` (one step), `runner` (the
resumable run and the command line), `scores` (per-question scores, bootstrap, t-interval), `provenance` (recipe,
commands, notes), `report` and `recipe_report` (the READMEs).
"""

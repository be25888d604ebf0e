"""The fine-tuning experiments on long-context QA (`experiments/qa_comparison.py`): the comparison of attention
configurations, the recipe's choice on the dev articles and the distillation comparison's stages, one grid each.

Modules: `grid` (cells, options), `layout` (paths), `plan` (estimates, dry run), `steps` (one step), `distilled`
(cells from a self-distilled encoder), `runner` (the resumable run, the command line), `parallel` (`--jobs`), `scores`
(statistics), `provenance` (recipe, commands, notes), `report`, `recipe_report`, `distillation_report` and
`stage_b_report` (the READMEs), `answer_blocks`.
"""

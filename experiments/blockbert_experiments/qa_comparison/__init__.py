"""The fine-tuning experiments on long-context QA (`experiments/qa_comparison.py`): the comparison of attention
configurations, the recipe's choice on the dev articles and the distillation comparison's stages, one grid each."""

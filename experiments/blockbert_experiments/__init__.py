"""The experiments behind the repository's reports (not part of the installed `blockbert_hf` package).

- `demo`: the steps of `make demo` (real MiniLM weights -> BlockBERT at N = 2048 -> QA -> answers over a long article).
- `minilm`: where the installed all-MiniLM-L6-v2 weights are, and what they are.
- `long_context`: the long-context QA test sets (contexts filled to T tokens, whole articles).
- `qa_comparison`: the fine-tuning comparison of attention patterns on long-context QA, and its report.
- `pretraining_comparison`: full vs blockwise attention in pre-training at an equal budget.
- `model_cards`: the cards of the models these experiments made, and the recipe cards of the paper's configurations.
- `visualization`: the attention-mask figures.

Each script `experiments/SCRIPT.py` starts the command line (`main`) of its module here. The scripts run as
`python experiments/SCRIPT.py`, which puts `experiments/` on `sys.path`; the tests find this
package through pytest's `pythonpath` setting. Peak memory, timing and the machine's record come from the benchmark
harness (`blockbert_benchmarks.measuring`): `experiments/blockbert_benchmarks` is a link to `benchmarks/`'s package,
so both folders import the same helpers without editing `sys.path`.
"""

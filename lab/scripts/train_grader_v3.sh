#!/usr/bin/env bash
# Rebuild the grader-reader v3 (fastcrag-grader-reader-minilm-l6-v3) from scratch: the v2 grader's weights, rebuilt
# from its int8 ONNX file in git history (commit add0899), then one time-budgeted training run of the grader-reader
# pool from them, exported as int8 ONNX. A clock-budgeted run trains as far as the machine lets it, so a rebuild on
# another machine is close to, not identical with, the shipped file; the shipped file's own trainable weights come
# back losslessly with `python -m lab unpack-grader`.
#
#   bash lab/scripts/train_grader_v3.sh [RUN_DIR] [MINUTES]      # defaults: runs/grader-v3, 55
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v3}
minutes=${2:-55}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
python -m lab unpack-grader --revision add0899 --out "$run-v2-torch"
python -m lab train-reranker --output "$run" --base-model "$run-v2-torch" --data-root "$data" --max-minutes "$minutes" \
  --max-pairs 150000 --max-length 192 --checkpoint-every 100 \
  --export "$run/export" --name fastcrag-grader-reader-minilm-l6-v3

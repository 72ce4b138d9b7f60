#!/usr/bin/env bash
# Rebuild the packaged grader v4 (fastcrag-grader-reader-minilm-l6-v4): grader v3 trained further on documentation
# pairs (a section's lead answers the questions its heading asks: python -m lab.scripts.docs_pairs) made from
# PostgreSQL 15's manual, mixed with the grader's own pool. One clock-budgeted run of 38 minutes on 2 cores:
#
#   bash lab/scripts/train_grader_v4.sh [RUN_FOLDER] [MINUTES]     # default runs/grader-v4, 38
#
# The manual is fetched from Debian (scripts/fetch_docs_corpus.sh, SHA-256 checked); it is no evaluation set. The
# model card has the settings, data and licences; a rebuild is close to, not identical with, the packaged file (the
# clock decides how far the run trains).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v4}
minutes=${2:-38}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
mkdir -p "$run"
bash scripts/fetch_docs_corpus.sh --corpus postgresql "$run/docs/postgresql"
python -m lab unpack-grader --revision f3f786c --out "$run/v3-torch"
python -m lab.scripts.docs_pairs "$run/docs/postgresql" --out "$run/pairs-postgresql.jsonl"
python -m lab train-reranker --output "$run" --base-model "$run/v3-torch" --data-root "$data" \
  --user-data "$run/pairs-postgresql.jsonl" --squad-questions 20000 --max-pairs 60000 --max-length 192 \
  --max-minutes "$minutes" --lr 2e-5 --checkpoint-every 100 \
  --export "$run/export" --name fastcrag-grader-reader-minilm-l6-v4
python -m lab calibrate --reranker "$run/export" --out "$run/calibration.json"

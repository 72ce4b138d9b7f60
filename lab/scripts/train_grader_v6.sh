#!/usr/bin/env bash
# Rebuild the packaged grader v6 (fastcrag-grader-reader-minilm-l6-v6): grader v4 trained further on questions worded
# as people word them (lab/questions/reworded/: 1,198 SQuAD 1.1 train questions reworded by hand, 1,167 newcomers'
# questions of PostgreSQL's manual; `python -m lab.experiments.reworded_pairs`), beside templated documentation pairs
# and a smaller share of the grader's own pool. One run of about 29 minutes on 2 cores:
#
#   bash lab/scripts/train_grader_v6.sh [RUN_FOLDER]     # default runs/grader-v6
#
# The manual is fetched from Debian (scripts/fetch_docs_corpus.sh, SHA-256 checked); it is no evaluation set. The
# model card has the settings, data and licences; a rebuild is close to, not identical with, the packaged file
# (bf16 arithmetic and thread timing differ between machines).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v6}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
mkdir -p "$run"
bash scripts/fetch_docs_corpus.sh --corpus postgresql "$run/docs/postgresql"
python -m lab unpack-grader --revision 5937bb1 --out "$run/v4-torch"
python -m lab.scripts.docs_pairs "$run/docs/postgresql" --out "$run/pairs-templated.jsonl" --max-sections 1200 --details
python -m lab.experiments.reworded_pairs pairs "$run/pairs-reworded.jsonl" --round 0 --docs postgresql="$run/docs/postgresql" \
  --repeat 2
python -m lab train-reranker --output "$run" --base-model "$run/v4-torch" --data-root "$data" \
  --user-data "$run/pairs-reworded.jsonl" --user-data "$run/pairs-templated.jsonl" --squad-questions 6000 \
  --max-pairs 36000 --max-length 192 --max-minutes 35 --lr 2e-5 \
  --export "$run/export" --name fastcrag-grader-reader-minilm-l6-v6
python -m lab calibrate --reranker "$run/export" --out "$run/calibration.json"

#!/usr/bin/env bash
# Rebuild grader v8 (fastcrag-grader-reader-minilm-l6-v8): grader v4 trained on the three rounds of questions worded
# as people word them (lab/questions/reworded/: 3,532 SQuAD 1.1 train questions reworded by hand, newcomers' questions
# of PostgreSQL's, Django's and SQLAlchemy's manuals), each manual's questions also against the nearest section of the
# other manuals (`--cross`: asked of the wrong manual, no answer), beside templated PostgreSQL pairs and the grader's
# own pool. Tried and not kept (lab/RESULTS.md, 2026-12-07): one run of about 50 minutes on 2 cores:
#
#   bash lab/scripts/train_grader_v8.sh [RUN_FOLDER]     # default runs/grader-v8
#
# The manuals are fetched from Debian (scripts/fetch_docs_corpus.sh, SHA-256 checked); none is an evaluation set.
# A rebuild is close to, not identical with, the run reported (bf16 arithmetic and thread timing differ; its pairs were
# made before the loader read a page's marked main content, so SQLAlchemy's pairs differ a little).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v8}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
mkdir -p "$run"
bash scripts/fetch_docs_corpus.sh --corpus postgresql "$run/docs/postgresql"
bash scripts/fetch_docs_corpus.sh --corpus django "$run/docs/django"
bash scripts/fetch_docs_corpus.sh --corpus sqlalchemy "$run/docs/sqlalchemy"
python -m lab unpack-grader --revision 5937bb1 --out "$run/v4-torch"
python -m lab.scripts.docs_pairs "$run/docs/postgresql" --out "$run/pairs-templated.jsonl" --max-sections 1200 --details
python -m lab.experiments.reworded_pairs pairs "$run/pairs-reworded.jsonl" --round 0 --round 1 --round 2 \
  --docs postgresql="$run/docs/postgresql" --docs django="$run/docs/django" --docs sqlalchemy="$run/docs/sqlalchemy" \
  --repeat 2 --cross
python -m lab train-reranker --output "$run" --base-model "$run/v4-torch" --data-root "$data" \
  --user-data "$run/pairs-reworded.jsonl" --user-data "$run/pairs-templated.jsonl" --squad-questions 6000 \
  --max-pairs 56000 --max-length 192 --max-minutes 55 --lr 2e-5 \
  --export "$run/export" --name fastcrag-grader-reader-minilm-l6-v8
python -m lab calibrate --reranker "$run/export" --out "$run/calibration.json"

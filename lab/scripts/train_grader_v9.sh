#!/usr/bin/env bash
# The v9 teacher: all-mpnet-base-v2 trained as a relevance cross-encoder on grader v8's mix: the three rounds of
# questions worded as people word them (lab/questions/reworded/), each manual's questions against the wrong manual
# (`--cross`), templated PostgreSQL pairs and the grader's own pool with 6,000 SQuAD questions. The first teacher (v5)
# saw no reworded question; this one is trained on the pairs that moved v7 and v8 on the paraphrase probe.
#
#   bash lab/scripts/train_grader_v9.sh [RUN_FOLDER] [MAX_PAIRS]     # default runs/grader-v9, 36000
#
# It trains on the CPU: bf16 where the CPU computes it natively (AVX-512 BF16 or AMX: about 4 pairs a second on two
# cores at 192 tokens, so 36,000 pairs take about two and a half hours), fp32 elsewhere (three times slower). It
# checkpoints every 100 steps and when stopped (Ctrl-C, SIGTERM), and the same command continues from the checkpoint,
# so the run spans sittings; the learning rate follows the planned steps, not the clock, so an interrupted run ends
# as an uninterrupted one would.
# The teacher lands in RUN_FOLDER/teacher/final (`python -m lab.scripts.paraphrase_probe --teacher DIR` reads it).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v9}
max_pairs=${2:-36000}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
mkdir -p "$run"
L="python -m lab.training.teacher"

bash lab/scripts/fetch_mpnet.sh "$run/mpnet"

for corpus in postgresql django sqlalchemy; do
  bash scripts/fetch_docs_corpus.sh --corpus "$corpus" "$run/docs/$corpus"
done
[ -f "$run/pairs-templated.jsonl" ] || python -m lab.scripts.docs_pairs "$run/docs/postgresql" \
  --out "$run/pairs-templated.jsonl" --max-sections 1200 --details
[ -f "$run/pairs-reworded.jsonl" ] || python -m lab.experiments.reworded_pairs pairs "$run/pairs-reworded.jsonl" \
  --round 0 --round 1 --round 2 --docs postgresql="$run/docs/postgresql" --docs django="$run/docs/django" \
  --docs sqlalchemy="$run/docs/sqlalchemy" --repeat 2 --cross
[ -f "$run/pool/pairs.jsonl.xz" ] || $L pool --out "$run/pool" --data-root "$data" \
  --user-data "$run/pairs-reworded.jsonl" --user-data "$run/pairs-templated.jsonl" --squad-questions 6000 \
  --max-pairs "$max_pairs"
$L teacher --pool "$run/pool" --base "$run/mpnet" --out "$run/teacher" --batch-size 32 --lr 2e-5 \
  --max-length 192 --checkpoint-every 100

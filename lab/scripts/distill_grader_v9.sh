#!/usr/bin/env bash
# The v9 student: the packaged 6-layer grader-reader (v6) distilled from the v9 teacher's scores, so the default
# reads meaning at today's speed. Runs after `bash lab/scripts/train_grader_v9.sh` has left RUN_FOLDER/teacher/final.
#
#   bash lab/scripts/distill_grader_v9.sh [RUN_FOLDER]     # default runs/grader-v9
#
# Steps, each resumable (the same command continues after Ctrl-C or SIGTERM, and skips what is done):
#   1. the teacher as an ONNX grader folder (RUN/teacher-onnx: to probe, calibrate and evaluate it as an option);
#   2. the teacher's logit for every pair of the training pool (RUN/scores.npz; about an hour on two cores);
#   3. the packaged v6 grader's torch weights (RUN/v6-torch), the student's start;
#   4. distillation: the teacher's logits with the labels beside them, the reader head kept on the answer spans
#      (RUN/student; about half an hour), then exported int8 as grader v9 (RUN/export);
#   5. the three manuals indexed (RUN/idx) and the student calibrated on SQuAD and SQLAlchemy's written questions,
#      with PostgreSQL's and Django's manuals as the wrong ones (RUN/calibration.json), as the packaged grader was;
#   6. the teacher as an int8 grader folder (RUN/teacher-int8, about 106 MB), calibrated the same way
#      (RUN/teacher-int8-calibration.json; about half an hour): the teacher measured as an option.
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/grader-v9}
export HF_HUB_OFFLINE=1
L="python -m lab.training.teacher"
[ -d "$run/teacher/final" ] || { echo "no $run/teacher/final: run bash lab/scripts/train_grader_v9.sh first" >&2; exit 1; }

[ -f "$run/teacher-onnx/model.onnx" ] || $L export "$run/teacher/final" --out "$run/teacher-onnx" \
  --name fastcrag-teacher-mpnet-v9 --max-length 256
[ -f "$run/scores.npz" ] || $L score --pool "$run/pool" --teacher "$run/teacher/final" --out "$run/scores.npz" \
  --max-length 192 --batch-size 64
[ -d "$run/v6-torch" ] || python -m lab unpack-grader --revision 51892f6 --out "$run/v6-torch"
[ -d "$run/student/final" ] || $L distill --pool "$run/pool" --scores "$run/scores.npz" --student "$run/v6-torch" \
  --out "$run/student" --batch-size 32 --lr 3e-5 --max-length 192 --checkpoint-every 100
[ -f "$run/export/model.onnx" ] || python - "$run" <<'EOF'
import sys
from pathlib import Path
from fastcrag.fitting.export import export_grader
run = Path(sys.argv[1])
export_grader(run / "student" / "final", run / "export", name="fastcrag-grader-reader-minilm-l6-v9",
              extra_meta={"train_max_length": 192,
                          "teacher": "fastcrag-teacher-mpnet-v9 (lab/scripts/train_grader_v9.sh)"})
EOF
for corpus in sqlalchemy postgresql django; do
  [ -f "$run/idx/$corpus/CURRENT" ] || fastcrag index --quiet --index "$run/idx/$corpus" "$run/docs/$corpus"
done
calibrate() {  # GRADER_FOLDER OUT: calibrated as the packaged grader was
  [ -f "$2" ] || python -m lab calibrate --reranker "$1" --out "$2" --docs sqlalchemy="$run/idx/sqlalchemy" \
    --wrong-manual "$run/idx/postgresql" --wrong-manual "$run/idx/django"
}
calibrate "$run/export" "$run/calibration.json"
[ -f "$run/teacher-int8/model.onnx" ] || $L export "$run/teacher/final" --out "$run/teacher-int8" \
  --name fastcrag-teacher-mpnet-v9-int8 --max-length 256 --int8
calibrate "$run/teacher-int8" "$run/teacher-int8-calibration.json"

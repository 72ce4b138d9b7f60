"""Where the lab finds its data: the shared data folder beside the repository, unless `FASTRAG_DATA` names another."""

from __future__ import annotations

import os
from pathlib import Path

#: The shared data folder (SQuAD, the BEIR sets and the packaged grader's training mix): `FASTRAG_DATA` (the setting
#: `fastcrag eval` reads) when set, else `../shared/data` relative to the repository root, where the lab runs. The
#: default of every lab command that reads data; the package itself has no default data folder.
SHARED_DATA = Path(os.environ.get("FASTRAG_DATA") or "../shared/data")

SQUAD, OFF_CORPUS = SHARED_DATA / "squad2-dev", SHARED_DATA / "train" / "squad11-train"
PER_CLASS, SEED, TARGET_PRECISION, TOLERANCE, PER_MANUAL = 200, 13, 0.9, 0.1, 200
TOP_K, REFINE_K, CHUNK_TOKENS, CHUNK_OVERLAP = 20, 6, 128, 24
"""The sample and rules the packaged calibration is drawn with (`lab calibrate`'s defaults), named here so that the
command line reads them without importing the calibration's models."""

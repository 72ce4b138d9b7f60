"""Where the lab finds its data: the shared data folder beside the repository, unless `FASTRAG_DATA` names another."""

from __future__ import annotations

import os
from pathlib import Path

#: The shared data folder (SQuAD, the BEIR sets and the packaged grader's training mix): `FASTRAG_DATA` (the setting
#: `fastcrag eval` reads) when set, else `../shared/data` relative to the repository root, where the lab runs. The
#: default of every lab command that reads data; the package itself has no default data folder.
SHARED_DATA = Path(os.environ.get("FASTRAG_DATA") or "../shared/data")

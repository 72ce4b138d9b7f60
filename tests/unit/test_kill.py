"""An index build killed with SIGKILL at random points always leaves a loadable, consistent index."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.store import FaissStore

from fakes import HashEmbeddings

BUILDER = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from fakes import HashEmbeddings
from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.loaders import SourceDocument
docs = (SourceDocument(f"doc-{{i}}", "t", f"Document {{i}} {run} talks about topic {{i}}. " * 40) for i in range(1500))
build_index(docs, Path({folder!r}), embeddings=HashEmbeddings(), batch_size=16, progress=False)
"""


def test_sigkill_during_builds_never_corrupts_the_index(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    build_index(
        [SourceDocument("seed", "t", "The first version.")], folder, embeddings=HashEmbeddings(), progress=False
    )
    rng = random.Random(7)
    tests_dir = str(Path(__file__).resolve().parents[1])
    kills = 0
    for run in range(6):
        script = BUILDER.format(tests=tests_dir, folder=str(folder), run=run)
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(rng.uniform(0.5, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        store = FaissStore.load(folder, HashEmbeddings())  # never raises: the pointer names a whole version
        assert store._index.ntotal == len(store.chunks)
        ids = [c["id"] for c in store.chunks]
        assert len(ids) == len(set(ids))
    assert kills >= 3, "the builds finished before they could be killed; slow them down"

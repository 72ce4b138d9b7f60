from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parents[1]

from lab.data import SHARED_DATA as _LAB_DATA  # noqa: E402  (the lab is on pytest's pythonpath)

#: The shared data folder the lab reads (`lab/data.py`), from the repository root.
SHARED_DATA = (ROOT / _LAB_DATA).resolve()


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real Postgres with pgvector for this test session (the bundled wheel, run as an unprivileged user).

    Skips with the reason printed when no Postgres can start here.
    """
    from fastcrag.server.postgres import LocalPostgresError, start_local_postgres

    try:
        return start_local_postgres(tmp_path_factory.mktemp("pg"), "fastcrag_test")
    except LocalPostgresError as exc:
        print(f"no Postgres for this session: {exc}", file=sys.stderr)
        pytest.skip(f"no Postgres could start: {exc}")

"""Atomic file writes: a temporary file beside the target, flushed to disk, then renamed over it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_MODE = 0o644
"""The mode of a new file: readable by all, like the package's own files (a secret is not written here)."""


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync it, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp makes the file private (0600); the result gets the mode a plain write would give it
        os.fchmod(fd, path.stat().st_mode & 0o777 if path.exists() else DEFAULT_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write indented JSON atomically."""
    write_text_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")

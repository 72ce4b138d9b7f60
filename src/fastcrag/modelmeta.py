"""A model folder's metadata file, `fastcrag_model.json`: one reader and one writer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastcrag.fileio import write_text_atomic

META_FILE = "fastcrag_model.json"


class ModelMetaError(ValueError):
    """A model folder's `fastcrag_model.json` is not a valid JSON object; the message names the file."""


def read_model_meta(folder: Path, *, required: bool = False) -> dict[str, Any]:
    """The metadata of the model in `folder` (`name`, `max_length`, ...); empty when it has none.

    Args:
        folder: The model folder.
        required: Raise instead of returning an empty dict when the folder has no metadata file.

    Raises:
        FileNotFoundError: `required` and the folder has no `fastcrag_model.json`.
        ModelMetaError: the file is not valid JSON, or not a JSON object.
    """
    path = Path(folder) / META_FILE
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"no {META_FILE} in {folder}")
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelMetaError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ModelMetaError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta


def write_model_meta(folder: Path, meta: Mapping[str, Any]) -> Path:
    """Write `meta` as `folder/fastcrag_model.json` (indented JSON, atomically) and return the file's path."""
    path = Path(folder) / META_FILE
    write_text_atomic(path, json.dumps(dict(meta), indent=2) + "\n")
    return path

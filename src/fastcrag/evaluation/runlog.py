"""Resumable runs: a config hash, a JSONL of per-item results appended as they finish, and atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastcrag.fileio import write_text_atomic


class ConfigMismatchError(ValueError):
    """The results file on disk was written by another configuration."""


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a JSON-serialisable configuration."""
    blob = json.dumps(config, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class ResultLog:
    """Per-item results in a JSONL file whose first line names the configuration that produced them.

    Each result is appended and fsynced as soon as it exists, so an interrupted run loses at most the item
    in flight; a truncated last line is ignored. Reopening with the same configuration resumes; a different
    configuration is refused unless `fresh`, which starts the file over.
    """

    def __init__(self, path: Path, config: Mapping[str, Any], fresh: bool = False) -> None:
        """Open (or create) the log at `path` for `config`.

        Raises:
            ConfigMismatchError: the file holds results of another configuration and `fresh` is false.
        """
        self.path = path
        self.config = dict(config)
        self.hash = config_hash(self.config)
        self.records: dict[str, dict[str, Any]] = {}
        if path.exists() and not fresh:
            self._load()
        else:
            header = {"type": "header", "config_hash": self.hash, "config": self.config}
            write_text_atomic(path, json.dumps(header, ensure_ascii=False, default=str) + "\n")

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0]) if lines else {}
        except ValueError:
            header = {}
        if header.get("config_hash") != self.hash:
            raise ConfigMismatchError(
                f"{self.path} holds results of another configuration (hash {header.get('config_hash')!r}, "
                f"this run {self.hash!r}); pass --fresh to start over or choose another --out"
            )
        valid = [lines[0]]
        for line in lines[1:]:
            try:
                row = json.loads(line)
            except ValueError:  # a line cut short by an interruption: that item runs again
                continue
            if isinstance(row, dict) and "key" in row:
                self.records[str(row["key"])] = row
                valid.append(line)
        if len(valid) != len(lines):  # drop the torn line so that appends start on a clean line
            write_text_atomic(self.path, "\n".join(valid) + "\n")

    def __contains__(self, key: object) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def add(self, key: str, record: Mapping[str, Any]) -> dict[str, Any]:
        """Append one result (durably) and remember it."""
        row = {"key": key, **record}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records[key] = row
        return row

"""Training, export and benchmarking of fastcrag's own cross-encoder grader."""

from __future__ import annotations

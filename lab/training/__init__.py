"""Training, distillation, export and benchmarking of fastcrag's own cross-encoder grader (from scratch)."""

from __future__ import annotations

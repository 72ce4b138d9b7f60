"""Offline procedures that fit fastcrag to a corpus: calibration."""

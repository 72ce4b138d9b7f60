"""Configuration: settings from the environment, per-run context, calibrated thresholds."""

from fastcrag.config.calibration import Calibration, CalibrationError, load_calibration
from fastcrag.config.settings import Context, RunConfig, Settings, resolve

__all__ = [
    "Calibration",
    "CalibrationError",
    "Context",
    "RunConfig",
    "Settings",
    "load_calibration",
    "resolve",
]

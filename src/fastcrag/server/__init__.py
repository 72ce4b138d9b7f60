"""The HTTP side of fastcrag: the production server (`fastcrag serve`, see `app`) and the console app."""

from __future__ import annotations

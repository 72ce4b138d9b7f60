"""`python -m lab COMMAND ...` from the repository root."""

from __future__ import annotations

import sys

from lab.cli import main

sys.exit(main())

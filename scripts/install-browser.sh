#!/usr/bin/env bash
# Install what the browser test (tests/integration/test_console.py) needs: Debian's chromium, and the Python
# packages that drive it (playwright, used with executable_path=/usr/bin/chromium; never `playwright install`,
# which downloads a browser of its own). Run inside the project's virtual environment; apt-get needs root.
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium
fi
chromium --version 2>/dev/null | grep -v '^\s*$' || /usr/bin/chromium --version

python -m pip install --quiet "playwright>=1.49"
python - <<'PY'
from playwright.sync_api import sync_playwright  # noqa: F401  (import check only: no browser download)
print("playwright ready; tests launch /usr/bin/chromium")
PY

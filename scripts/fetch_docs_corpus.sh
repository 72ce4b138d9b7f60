#!/usr/bin/env bash
# Fetch a documentation corpus as Debian ships it:
#
#   bash scripts/fetch_docs_corpus.sh [--corpus git|flask|postgresql|django|sqlalchemy|apache|typer|eigen|libssh|jsoup|proftpd] DIR
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
# sqlalchemy: SQLAlchemy 1.4's HTML documentation as Sphinx built it, package python-sqlalchemy-doc 1.4.46+ds1-1
# (Expat/MIT): its ORM, Core, tutorial, FAQ and dialect pages, the introduction and the glossary (133 pages; not the
# changelog nor the module source listings).
# None of postgresql, django and sqlalchemy is evaluated on: the packaged grader's documentation pairs are made from
# PostgreSQL's (`python -m lab.scripts.docs_pairs`, lab/scripts/train_grader_v4.sh), and newcomers' questions were
# written for sections of all three (lab/questions/reworded/, lab/RESULTS.md).
# apache, typer and eigen are held-out corpora, each from a documentation generator the others do not use; their
# question sets (tests/data/docs_heldout_<corpus>.jsonl, 30 questions each) name pages relative to DIR:
# apache: the Apache HTTP Server 2.4 manual in English, package apache2-doc 2.4.68-1~deb12u1 (Apache-2.0), pages built
# from Apache's own XML by its XSLT style sheets: the manual/en folder (guides, how-tos, modules and directives,
# programs, FAQ, glossary: 244 pages, with their paths).
# typer: Typer 0.7's documentation as MkDocs built it, package python-typer-doc 0.7.0-1 (MIT/Expat): the home page,
# tutorial, features, alternatives, Typer CLI, contributing and help pages (59 pages, with their paths; not the release
# notes nor the search page). Debian's build left its code examples as unresolved include lines
# (`{!../docs_src/....py!}`): the pages hold the prose and the terminal sessions, not the example programs.
# eigen: Eigen 3.4's documentation as Doxygen 1.9.4 built it, package libeigen3-doc 3.4.0-4 (MPL-2.0; two pages
# BSD-3-Clause): the top-level pages of its html folder, the tutorials, topic pages, module and class reference (275
# pages; not the header source listings, member lists and folder listings Doxygen adds, nor the `unsupported` modules).
# libssh: libssh 0.10's documentation as Doxygen built it, package libssh-doc 0.10.6-0+deb12u3 (LGPL-2.1+), from
# Debian's security archive: the top-level pages of its html folder, the tutorial chapters and the API reference by
# module and class (127 pages; not the source listings, member lists and folder listings). A fourth held-out corpus:
# tests/data/docs_heldout_libssh.jsonl names pages relative to DIR.
# jsoup: jsoup 1.15.3's API documentation as Javadoc built it, package libjsoup-java-doc 1.15.3-1 (MIT): the overview
# page (index.html) and each package's summary and class pages (126 pages; not the class-use folders, package trees
# and use lists, nor the index, class lists, deprecated list, constant values and serialized form). A fifth held-out
# corpus: tests/data/docs_heldout_jsoup.jsonl names pages relative to DIR.
# proftpd: the ProFTPD 1.3.8 documentation, package proftpd-doc 1.3.8+dfsg-4+deb12u5 (GPL-2+), hand-written HTML
# pages (no documentation generator): the howtos, the core and contributed modules' pages, the directive list and the
# package's index (130 pages, with their paths; not faq.html, DocBook's output under its own terms). A sixth
# held-out corpus: tests/data/docs_heldout_proftpd.jsonl names pages relative to DIR.
#
# The package's SHA-256 is checked, and its copyright file is put into DIR with the pages. Run it again: nothing is
# downloaded when DIR already holds this version. The corpus is not part of the repository.
#
# Needs curl or wget (or apt-get on Debian/Ubuntu), and dpkg-deb or ar + tar. FASTRAG_DEBIAN_MIRROR overrides the
# mirror (default http://deb.debian.org/debian; for libssh, http://deb.debian.org/debian-security); once Debian
# replaces a version, point it at a https://snapshot.debian.org/archive/debian/<timestamp> (or debian-security)
# archive that still holds the file (the SHA-256 is checked).
set -euo pipefail

die() { echo "fetch_docs_corpus: $*" >&2; exit 1; }

CORPUS=git
ARCHIVE=""  # the corpus's archive when it is not the main one
EXCLUDE=""  # names (find -name patterns) of pages left out of what PARTS takes
if [ "${1:-}" = "--corpus" ]; then
    [ $# -ge 2 ] || die "--corpus needs git, flask, postgresql, django, sqlalchemy, apache, typer, eigen, libssh, jsoup or proftpd"
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
sqlalchemy)
    PACKAGE=python-sqlalchemy-doc
    VERSION="1.4.46+ds1-1"
    FILE="python-sqlalchemy-doc_1.4.46+ds1-1_all.deb"
    POOL="pool/main/s/sqlalchemy/$FILE"
    SHA256=8805c3167ef75278ac6fd58ed9856321c2b2e3a7e441edba84b2eb955216d0fd
    DOCS=usr/share/doc/python-sqlalchemy-doc/html
    COPYRIGHT=usr/share/doc/python-sqlalchemy-doc/copyright
    PARTS="orm core tutorial faq dialects intro.html glossary.html"  # these folders' pages, with their paths
    ;;
apache)
    PACKAGE=apache2-doc
    VERSION="2.4.68-1~deb12u1"
    FILE="apache2-doc_2.4.68-1~deb12u1_all.deb"
    POOL="pool/main/a/apache2/$FILE"
    SHA256=cee8fe80ffb5de2744cd690c3d795b489e43a1c44c4e3a634c521642f22d7835
    DOCS=usr/share/doc/apache2-doc/manual/en
    COPYRIGHT=usr/share/doc/apache2-doc/copyright
    PARTS=ALL  # the English manual's folder whole (its pages only)
    ;;
typer)
    PACKAGE=python-typer-doc
    VERSION="0.7.0-1"
    FILE="python-typer-doc_0.7.0-1_all.deb"
    POOL="pool/main/t/typer/$FILE"
    SHA256=cac49afacfc9918df6ca80bddf28f716f1088c5d7ae8de3fb8312d2cb8eb0755
    DOCS=usr/share/doc/python-typer-doc/html
    COPYRIGHT=usr/share/doc/python-typer-doc/copyright
    PARTS="index.html tutorial features alternatives typer-cli contributing help-typer"  # with their paths
    ;;
eigen)
    PACKAGE=libeigen3-doc
    VERSION="3.4.0-4"
    FILE="libeigen3-doc_3.4.0-4_all.deb"
    POOL="pool/main/e/eigen3/$FILE"
    SHA256=87fc424386cef92f58d0594936fa668d1b73d6e52232d2f99369e3e66aa5c0ff
    DOCS=usr/share/doc/libeigen3-dev/html  # (the package puts its pages under libeigen3-dev's folder)
    COPYRIGHT=usr/share/doc/libeigen3-doc/copyright
    PARTS=""  # the top-level pages
    EXCLUDE="*_source.html *-members.html dir_*.html"  # header source listings, member lists, folder listings
    ;;
libssh)
    PACKAGE=libssh-doc
    VERSION="0.10.6-0+deb12u3"
    FILE="libssh-doc_0.10.6-0+deb12u3_all.deb"
    POOL="pool/updates/main/libs/libssh/$FILE"
    ARCHIVE=http://deb.debian.org/debian-security  # a security update: only the security archive holds it
    SHA256=d0e62da0a2d6f999ace4757ae0240b68cfb654571bc3068ac64102ccd1e74d3c
    DOCS=usr/share/doc/libssh-dev/html  # (the package puts its pages under libssh-dev's folder)
    COPYRIGHT=usr/share/doc/libssh-doc/copyright
    PARTS=""  # the top-level pages
    EXCLUDE="*_source.html *-members.html dir_*.html"  # source listings, member lists, folder listings
    ;;
jsoup)
    PACKAGE=libjsoup-java-doc
    VERSION="1.15.3-1"
    FILE="libjsoup-java-doc_1.15.3-1_all.deb"
    POOL="pool/main/j/jsoup/$FILE"
    SHA256=3833784dbb5236bab2e0c4fd8e1fc3bb676baa4a006181a57f3f0af73ea067c8
    DOCS=usr/share/doc/libjsoup-java/api  # (the package puts its pages under libjsoup-java's folder)
    COPYRIGHT=usr/share/doc/libjsoup-java-doc/copyright
    # the overview and each package's pages (globs, expanded in DOCS): not the class-use folders beneath them
    PARTS="index.html org/jsoup/*.html org/jsoup/examples/*.html org/jsoup/helper/*.html org/jsoup/internal/*.html
        org/jsoup/nodes/*.html org/jsoup/parser/*.html org/jsoup/safety/*.html org/jsoup/select/*.html"
    EXCLUDE="package-tree.html package-use.html"  # the packages' class trees and use lists
    ;;
proftpd)
    PACKAGE=proftpd-doc
    VERSION="1.3.8+dfsg-4+deb12u5"
    FILE="proftpd-doc_1.3.8+dfsg-4+deb12u5_all.deb"
    POOL="pool/main/p/proftpd-dfsg/$FILE"
    SHA256=6db51434fb08b75d94dbeac56cbea60f201b04416fcb8aadfb9d5ed8b2798e99
    DOCS=usr/share/doc/proftpd-doc
    COPYRIGHT=usr/share/doc/proftpd-doc/copyright
    PARTS="index.html howto modules contrib directives"  # with their paths; not faq.html (DocBook's, under its own terms)
    ;;
*) die "unknown corpus '$CORPUS' (git, flask, postgresql, django, sqlalchemy, apache, typer, eigen, libssh, jsoup or proftpd)" ;;
esac
MIRROR="${FASTRAG_DEBIAN_MIRROR:-${ARCHIVE:-http://deb.debian.org/debian}}"
MARKER=".fastcrag-corpus"

[ $# -eq 1 ] || die "usage: bash scripts/fetch_docs_corpus.sh [--corpus git|flask|postgresql|django|sqlalchemy|apache|typer|eigen|libssh|jsoup|proftpd] DIR (the folder to put it in)"
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
read -r -a excluded <<<"$EXCLUDE"  # (not glob-expanded)
for pattern in ${excluded[@]+"${excluded[@]}"}; do
    find "$NEW" -type f -name "$pattern" -delete
done
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

"""Whether a chunker change moves the evaluation corpora's chunks (lab/RESULTS.md, "Answers from documentation").

Chunks SciFact's corpus and SQuAD's paragraphs with the chunker (`fastcrag.retrieval.blocks`) as it stands at
`--against` (a git commit) and as it stands now, and counts the documents whose chunks differ. None differing means
their indexes, first pass and grader order, so SciFact's nDCG@10, are what they were.

    python -m lab.scripts.chunk_diff --against 23997de
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # the project's own code, installed or not

from fastcrag.retrieval import blocks  # noqa: E402
from fastcrag.retrieval.loaders import load_documents  # noqa: E402
from lab.data import SHARED_DATA  # noqa: E402


def chunker_at(commit: str) -> ModuleType:
    """`fastcrag.retrieval.blocks` as it stood at `commit`, loaded beside today's."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:src/fastcrag/retrieval/blocks.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "blocks_then.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("blocks_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["blocks_then"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """Print, as JSON, how many documents of each corpus chunk differently."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="the git commit whose chunker to compare with")
    ap.add_argument("--tokens", type=int, default=128, help="chunk size (default 128)")
    ap.add_argument("--overlap", type=int, default=24, help="chunk overlap (default 24)")
    args = ap.parse_args(argv)
    then = chunker_at(args.against)
    squad = json.loads((SHARED_DATA / "squad2-dev" / "dev-v2.0-articles-1-8.json").read_text(encoding="utf-8"))
    corpora = {
        "scifact": [d.text for d in load_documents([SHARED_DATA / "scifact" / "corpus.jsonl.gz"])],
        "squad": [p["context"] for a in squad["data"] for p in a["paragraphs"]],
    }
    out = {}
    for name, texts in corpora.items():
        differ = sum(
            then.chunk_sections(then.sections(t), args.tokens, args.overlap)
            != blocks.chunk_sections(blocks.sections(t), args.tokens, args.overlap)
            for t in texts
        )
        out[name] = {"documents": len(texts), "chunked_differently": differ}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

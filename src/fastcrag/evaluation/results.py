"""`fastcrag eval results`: stitch the three reports into one Results page."""

from __future__ import annotations

import re
from pathlib import Path

from fastcrag.fileio import write_text_atomic

REPORTS = (  # (folder under runs/, section title, whether a missing report is worth a note)
    ("eval-abstention", "Abstention and truthfulness: CRAG on vs off", True),
    ("eval-abstention-bi-encoder", "Abstention with the bi-encoder stand-in grader (earlier calibration)", False),
    ("eval-retrieval", "Retrieval quality", True),
    ("bench", "Latency and grader cost", True),
)
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def demote(markdown: str, levels: int = 1) -> str:
    """Push every ATX heading down `levels` levels (`#` becomes `##`)."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown, flags=re.MULTILINE)


def relink_images(markdown: str, folder: str) -> str:
    """Image references become links to the PNGs in the run folder (runs/ is not committed)."""
    return _IMAGE.sub(lambda m: f"plot `{folder}/{m.group(2)}`", markdown)


def compose(runs: Path, commands: list[str], preface: str = "") -> str:
    """The Results page: how to reproduce, then each report found under `runs`, demoted one heading level."""
    lines = ["# Results", ""]
    if preface:
        lines += [preface.strip(), ""]
    lines += ["Reproduce (from the repository root, `FASTRAG_DATA` naming the data folder):", "", "```bash"]
    lines += [*commands, "```", ""]
    for folder, title, required in REPORTS:
        path = runs / folder / "report.md"
        if not path.is_file():
            lines += [f"## {title}", "", f"_No report at `{path}`._", ""] if required else []
            continue
        lines += [f"## {title}", ""]
        body = path.read_text(encoding="utf-8").split("\n", 1)[1]  # the report's own title is replaced
        lines += [relink_images(demote(body, 1), str(runs / folder)).strip(), ""]
    return "\n".join(lines)


def write_results(runs: Path, out: Path, commands: list[str], preface: str = "") -> str:
    """Compose the page and write it atomically to `out`."""
    text = compose(runs, commands, preface)
    write_text_atomic(out, text)
    return text

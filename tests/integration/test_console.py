"""The decision-trace console end to end: `langgraph dev` serves /console, headless Chromium asks and draws the trace.

Needs Debian's chromium (`/usr/bin/chromium`) and the `playwright` Python package (no `playwright install`):
`bash scripts/install-browser.sh`. Skips, naming the reason, only when one of them is missing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_server import OFF_CORPUS, Server, report, run_server

pytestmark = pytest.mark.integration

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if chromium_path() is None:
        pytest.skip("chromium is not installed (bash scripts/install-browser.sh installs Debian's chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (bash scripts/install-browser.sh)")
    with run_server(tmp_path_factory.mktemp("console-server")) as s:
        s.wait("warm-up: what is a generator?")  # load the models before the browser's first request
        yield s


@pytest.fixture(scope="module")
def page(server: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="fastcrag-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=chromium_path(),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1000, "height": 1200},
            )
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(180_000)
            page.errors = []  # type: ignore[attr-defined]
            page.requests = []  # type: ignore[attr-defined]
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))  # type: ignore[attr-defined]
            page.on(
                "console",
                lambda msg: page.errors.append(msg.text) if msg.type == "error" else None,  # type: ignore[attr-defined]
            )
            page.on("request", lambda req: page.requests.append(req.url))  # type: ignore[attr-defined]
            yield page
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def ask(page: Any, question: str) -> None:
    page.fill("#question", question)
    page.click("#ask")
    page.wait_for_function("document.getElementById('status').className !== 'busy'")
    status = page.inner_text("#status")
    assert status.startswith("Answered"), status


def test_console_answers_and_draws_the_trace(
    server: Server, page: Any, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    page.goto(f"{server.url}/console")
    assert page.title() == "fastcrag decision-trace console"
    ask(page, "How does the with statement work?")

    answer = page.inner_text("#answer")
    assert answer and answer != "I don't know."
    citations = page.locator("#citations li.citation")
    assert citations.count() >= 1 and "pydoc:" in citations.first.inner_text()
    band = page.inner_text("#trace-band")
    assert band in {"CORRECT", "AMBIGUOUS"}
    assert page.inner_text("#trace-action") in {"generate", "refine"}
    assert page.get_attribute("#trace-band", "class") == f"band {band}"

    bars = page.locator("#trace-chart rect.bar")
    assert bars.count() >= 3
    verdicts = {bars.nth(i).get_attribute("data-verdict") for i in range(bars.count())}
    assert verdicts <= {"CORRECT", "AMBIGUOUS", "INCORRECT", "UNGRADED"}  # UNGRADED: the early exit's
    lines = page.locator("#trace-chart line.threshold")
    assert lines.count() == 2
    names = [lines.nth(i).get_attribute("data-name") for i in range(2)]
    assert names == ["reranker_threshold", "crag_upper"]
    lower, upper = (float(lines.nth(i).get_attribute("data-value")) for i in range(2))
    assert 0 <= lower <= upper <= 1
    # a bar's verdict agrees with where it ends relative to the two lines
    for i in range(bars.count()):
        if bars.nth(i).get_attribute("data-verdict") == "UNGRADED":
            continue
        score = float(bars.nth(i).get_attribute("data-score"))
        expected = "CORRECT" if score >= upper else "AMBIGUOUS" if score >= lower else "INCORRECT"
        assert bars.nth(i).get_attribute("data-verdict") == expected
    assert page.inner_text("#trace-strips") != ""
    assert page.inner_text("#trace-thresholds") == f"{lower:.3f} / {upper:.3f}"

    shot = tmp_path_factory.mktemp("console") / "console.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    report(capsys, f"console screenshot: {shot}")

    assert not page.errors, page.errors  # type: ignore[attr-defined]
    assert all(url.startswith(server.url) for url in page.requests), page.requests  # type: ignore[attr-defined]
    assert f"{server.url}/runs/wait" in page.requests  # type: ignore[attr-defined]


def test_console_shows_an_abstention(server: Server, page: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    page.goto(f"{server.url}/console")
    ask(page, OFF_CORPUS)
    assert page.inner_text("#answer") == "I don't know."
    assert page.inner_text("#citations") == "none (abstained)"
    assert page.inner_text("#trace-band") == "INCORRECT"
    assert page.inner_text("#trace-action") == "abstain"
    bars = page.locator("#trace-chart rect.bar")
    assert all(bars.nth(i).get_attribute("data-verdict") == "INCORRECT" for i in range(bars.count()))
    page.screenshot(path=str(tmp_path_factory.mktemp("console") / "console-abstain.png"), full_page=True)


def test_console_sends_context_overrides(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/console?q=How%20does%20the%20with%20statement%20work%3F")
    page.wait_for_function("document.getElementById('status').className === 'done'")
    page.click("#overrides summary")
    page.uncheck("#crag_enabled")
    ask(page, "How does the with statement work?")
    assert page.inner_text("#trace-action") == "disabled"


FLARE_RESULT = {
    "answer": "The with statement wraps a block in a context manager.",
    "citations": [{"chunk_id": "c1", "source": "pydoc:with", "score": 0.91}],
    "crag": {
        "action": "generate",
        "band": "CORRECT",
        "top_score": 0.91,
        "strips_kept": 0,
        "rewritten_query": None,
        "rewriter": None,
        "retrieval": "hybrid",
        "verdicts": [{"chunk_id": "c1", "source": "pydoc:with", "score": 0.91, "verdict": "CORRECT"}],
        "timings": {"retrieve_ms": 10.0, "rerank_ms": 20.0, "crag_ms": 1.0, "generate_ms": 900.0, "flare_ms": 60.0},
        "failure": None,
        "question": "How does the with statement work?",
        "conversation": None,
        "reranker": "grader",
        "thresholds": {"reranker_threshold": 0.45, "crag_upper": 0.84, "condition_factor": 0.0},
        "flare": [
            {
                "sentence": "It calls __enter__ twice.",
                "uncertain": ["twice."],
                "query": "It calls __enter__",
                "query_by": "masked",
                "band": "CORRECT",
                "top_score": 0.9,
                "action": "add",
                "added": ["c2"],
                "rewritten": "It calls __enter__ on entry.",
                "failure": None,
                "timings": {"query_ms": 0.1, "retrieve_ms": 8.0, "rerank_ms": 30.0, "refine_ms": 0.0,
                            "generate_ms": 400.0},
            },
            {
                "sentence": "It was added in Python 1.0.",
                "uncertain": ["1.0."],
                "query": "It was added in Python",
                "query_by": "masked",
                "band": "INCORRECT",
                "top_score": 0.1,
                "action": "drop",
                "added": [],
                "rewritten": None,
                "failure": None,
                "timings": {"query_ms": 0.1, "retrieve_ms": 7.0, "rerank_ms": 25.0, "refine_ms": 0.0,
                            "generate_ms": 0.0},
            },
        ],
        "flare_stop": "end",
    },
}  # fmt: skip


def test_console_shows_flare_active_retrievals(
    server: Server, page: Any, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    page.goto(f"{server.url}/console")
    page.click("#overrides summary")
    page.select_option("#mode", "flare")
    # the served graph's generator (extractive) has no FLARE mode: the run abstains and says why
    ask(page, "How does the with statement work?")
    assert page.inner_text("#trace-action") == "abstain"
    assert "has no FLARE mode" in page.inner_text("#trace-failure")
    assert page.is_visible("#flare") and page.locator("#flare-table tbody tr").count() == 0
    # a FLARE answer (as a chat model with log-probabilities gives it): one row per active retrieval
    sent: list[dict[str, Any]] = []

    def answer(route: Any) -> None:
        sent.append(json.loads(route.request.post_data))
        route.fulfill(status=200, content_type="application/json", body=json.dumps(FLARE_RESULT))

    page.route("**/runs/wait", answer)
    try:
        ask(page, "How does the with statement work?")
    finally:
        page.unroute("**/runs/wait")
    assert sent[0]["context"]["mode"] == "flare"
    rows = page.locator("#flare-table tbody tr")
    assert rows.count() == 2
    assert [rows.nth(i).get_attribute("data-action") for i in range(2)] == ["add", "drop"]
    assert [rows.nth(i).get_attribute("data-band") for i in range(2)] == ["CORRECT", "INCORRECT"]
    assert "It calls __enter__ (masked)" in rows.nth(0).inner_text()
    assert "→ It calls __enter__ on entry." in rows.nth(0).inner_text()  # written again on the added evidence
    assert "retrieve 8.0" in rows.nth(0).inner_text() and "generate 400.0" in rows.nth(0).inner_text()
    assert page.inner_text("#flare-summary") == "2 active retrievals; writing stopped: end"
    assert "flare 60.0" in page.inner_text("#trace-timings")
    shot = tmp_path_factory.mktemp("console") / "console-flare.png"
    page.screenshot(path=str(shot), full_page=True)
    report(capsys, f"console screenshot (FLARE): {shot}")
    # a CRAG answer hides the table
    page.goto(f"{server.url}/console")
    ask(page, "How does the with statement work?")
    assert not page.is_visible("#flare")
    assert not page.errors, page.errors  # type: ignore[attr-defined]

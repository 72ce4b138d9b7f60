"""Real chat front-end in a real browser: the Agent Chat UI holds a two-turn conversation with `fastcrag serve`.

What it does
------------
1. starts `fastcrag serve` (`fastcrag.evaluation.launch.serve`: 1 worker, a free loopback port, no API key, SQLite
   checkpoints in a temp folder, HF_HUB_OFFLINE=1, FASTRAG_LLM=extractive);
2. starts the built Agent Chat UI (`next start`, a free loopback port);
3. opens it in headless Chromium (Debian's chromium driven by Playwright's sync API, as the browser test drives it;
   `bash scripts/install-browser.sh` installs both) with `?apiUrl=...&assistantId=crag&chatHistoryOpen=true`;
4. sends "How does the with statement work?", waits for the answer, then "What does the global statement do?",
   waits again, and checks that both answers (read back from the thread's state) are shown in the page;
5. reloads the page on the thread (the UI loads it back from the server) and checks that the
   "Thread History" sidebar lists it (`threads.search` by `graph_id` metadata, first message as title);
6. checks with `langgraph_sdk` that `threads.search` finds the thread with 4 messages (human, ai, human, ai);
7. saves a screenshot (`--screenshot`, default runs/chat-ui.png) and stops everything it started.

With `--per-user`, the server runs a langgraph.json `auth` handler (two opaque tokens, owner-only threads; see
docs/DEPLOY.md "Per-user access"): before the session another user holds a conversation of their own; the browser
sends the checked user's token (the UI's API key, `localStorage["lg:chat:apiKey"]`, which it sends as `X-Api-Key`);
and the checks add that the other user's thread is neither in the UI's Thread History nor in the user's
`threads.search`, and that the other user cannot read the UI's thread (404). `direct` mode only.

Exit status 0 when every check passed, 1 otherwise; the server and UI logs, the failed requests the browser saw
(method, URL, status, failure) and the console errors are printed on failure (and with -v).

Two ways the UI reaches the server (`--mode`):
- `direct` (default): the browser calls fastcrag serve itself (`apiUrl=http://127.0.0.1:SERVER`), the way the UI
  is meant to talk to a LangGraph server (NEXT_PUBLIC_API_URL / the setup form). The UI runs on another origin,
  so the server is started with `--cors-origins <the UI's origin>` (preflights answered, Content-Location exposed).
- `proxy`: the browser calls the UI's own `/api` route (langgraph-nextjs-api-passthrough, same origin), which
  forwards to `LANGGRAPH_API_URL=http://127.0.0.1:SERVER` server-side; no CORS needed.

Building the UI (done once; `--build` does exactly this, into `--ui-dir`, default runs/agent-chat-ui/app)
-------------------------------------------------------------------------------------------------
The UI is https://github.com/langchain-ai/agent-chat-ui (checked with commit fdc87e6, Next 15.5.21,
@langchain/langgraph-sdk 1.8.10). It lives outside this repository, and its packages come from the npm registry:

    git clone --depth 1 https://github.com/langchain-ai/agent-chat-ui runs/agent-chat-ui/app
        # (or --ui-source DIR: unpack HEAD of a local clone of it instead)
    cd runs/agent-chat-ui/app
    npx -y pnpm@10.5.1 install --frozen-lockfile                     # about 30 s
    NEXT_TELEMETRY_DISABLED=1 NEXT_PUBLIC_ASSISTANT_ID=crag \
      NEXT_FONT_GOOGLE_MOCKED_RESPONSES=$PWD/../font-mock.cjs \
      npx next build --no-lint                                       # about 90 s on 2 busy cores

`font-mock.cjs` (written by --build next to the app folder) stands in for Google Fonts: the layout uses
next/font/google (Inter), which `next build` downloads; with the mock the build needs no font server and the page
uses a local/fallback font. NEXT_PUBLIC_* values are inlined at build time, so the server URL is NOT baked in:
the script passes it as the `apiUrl` query parameter (which the UI prefers over NEXT_PUBLIC_API_URL), so any
port works without a rebuild. To run the UI by hand:

    cd runs/agent-chat-ui/app && LANGGRAPH_API_URL=http://127.0.0.1:8000 npx next start -H 127.0.0.1 -p 3000
    # then open http://127.0.0.1:3000/?apiUrl=http://127.0.0.1:8000&assistantId=crag   (direct)
    #      or  http://127.0.0.1:3000/?apiUrl=http://127.0.0.1:3000/api&assistantId=crag (proxy)

Usage
-----
    python scripts/chat_ui_check.py --build            # build the UI (if missing) and run the check
    python scripts/chat_ui_check.py                    # run the check against the built UI (--mode direct)
    python scripts/chat_ui_check.py --mode proxy --screenshot runs/chat-ui-proxy.png
    python scripts/chat_ui_check.py --per-user         # two users with tokens: the UI shows only its user's threads
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastcrag.evaluation.launch import OFFLINE_ENV, ServerProcess, ServerStartError, free_port, launch, serve

REPO = Path(__file__).resolve().parents[1]
UI_GIT_URL = "https://github.com/langchain-ai/agent-chat-ui"
PNPM = "pnpm@10.5.1"
QUESTIONS = ("How does the with statement work?", "What does the global statement do?")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"]
OTHER_QUESTION = "What does the nonlocal statement do?"
"""The other user's question (`--per-user`): it must never show in the checked user's UI."""
AUTH_PY = """\
# Two users, one opaque token each (tokens from the environment); each sees only the threads they made.
import os

from langgraph_sdk import Auth

auth = Auth()
USERS = {os.environ["CHAT_UI_TOKEN"]: "ui-user", os.environ["CHAT_UI_OTHER_TOKEN"]: "other-user"}


@auth.authenticate
async def authenticate(headers: dict) -> str:
    # the Agent Chat UI sends its API key as X-Api-Key; other clients send a bearer token
    bearer = headers.get(b"authorization", b"").decode().partition(" ")[2]
    user = USERS.get(headers.get(b"x-api-key", b"").decode() or bearer)
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="invalid or missing token")
    return user


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType:
    if ctx.action in ("create", "create_run"):
        value["metadata"] = {**(value.get("metadata") or {}), "owner": ctx.user.identity}
    return {"owner": ctx.user.identity}


@auth.on.assistants
async def shared_assistant(ctx: Auth.types.AuthContext, value: dict) -> None:
    return None
"""
FONT_MOCK = """\
// Offline stand-in for Google Fonts during `next build` (next/font/google): every CSS URL gets a
// local() @font-face, so no font file is downloaded and the page falls back to a system font.
const css = "@font-face { font-family: 'Inter'; font-style: normal; font-weight: 400; font-display: swap; " +
  "src: local('Inter'), local('Arial'); }\\n";
module.exports = new Proxy({}, { get: (_t, key) => (typeof key === "string" ? css : undefined) });
"""


def log(msg: str) -> None:
    """Print one timestamped progress line."""
    print(f"[chat-ui-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def chromium_path() -> str | None:
    """Debian's chromium (what scripts/install-browser.sh installs), or another on PATH."""
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


# ----------------------------------------------------------------------------------------------------- build


def run_step(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run one build command, its output shown, and log how long it took."""
    log(f"$ (cd {cwd} && {' '.join(cmd)})")
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, check=True)
    log(f"  took {time.monotonic() - t0:.0f} s")


def build_ui(ui_dir: Path, force: bool, source: Path | None) -> None:
    """Fetch the Agent Chat UI into `ui_dir` (if empty), install its npm packages and `next build` it.

    Args:
        ui_dir: The UI's work tree.
        force: Install and build again even when built.
        source: A local git clone of the UI to unpack (its HEAD) instead of cloning from GitHub.
    """
    font_mock = ui_dir.parent / "font-mock.cjs"
    if not (ui_dir / "package.json").exists():
        ui_dir.mkdir(parents=True, exist_ok=True)
        if source is not None:
            log(f"unpacking HEAD of {source} into {ui_dir}")
            archive = subprocess.run(["git", "-C", str(source), "archive", "HEAD"], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(ui_dir)], input=archive.stdout, check=True)
        else:
            ui_dir.rmdir()
            run_step(["git", "clone", "--depth", "1", UI_GIT_URL, str(ui_dir)], cwd=ui_dir.parent)
    font_mock.write_text(FONT_MOCK)
    if force or not (ui_dir / "node_modules" / ".bin" / "next").exists():
        run_step(["npx", "-y", PNPM, "install", "--frozen-lockfile"], cwd=ui_dir)
    if force or not (ui_dir / ".next" / "BUILD_ID").exists():
        env = {"NEXT_TELEMETRY_DISABLED": "1", "NEXT_PUBLIC_ASSISTANT_ID": "crag"}
        run_step(
            ["npx", "next", "build", "--no-lint"],
            cwd=ui_dir,
            env={**env, "NEXT_FONT_GOOGLE_MOCKED_RESPONSES": str(font_mock)},
        )
    else:
        log(f"{ui_dir}/.next already built (use --rebuild to build again)")


# ----------------------------------------------------------------------------------------------------- servers


def page_answers(server: ServerProcess) -> bool:
    """Whether the UI's front page answers below 500 (`next start` has no `/ok`)."""
    try:
        with urllib.request.urlopen(f"{server.url}/", timeout=2) as r:
            return int(r.status) < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


@contextlib.contextmanager
def fastcrag_server(args: argparse.Namespace, tmp: Path, ui_url: str) -> Iterator[str]:
    """The URL of `fastcrag serve` started for the check (or of `--server-url`), stopped on exit."""
    if args.server_url:
        (tmp / "server.log").write_text(f"(server at {args.server_url} not started by this script)\n")
        log(f"using the running server {args.server_url}")
        yield args.server_url.rstrip("/")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_API_KEY")}
    env.update(OFFLINE_ENV, FASTRAG_LLM="extractive", FASTRAG_CHECKPOINTS=str(tmp / "threads.sqlite"))
    extra: list[str] = []
    if args.per_user:
        (tmp / "auth.py").write_text(AUTH_PY)
        (tmp / "langgraph.json").write_text(json.dumps({"auth": {"path": "./auth.py:auth"}}))
        env.update(CHAT_UI_TOKEN=args.token, CHAT_UI_OTHER_TOKEN=args.other_token)
        extra = ["--config", str(tmp / "langgraph.json")]
    # 10 minutes: the first serve on a machine builds the embedded Python-reference index before it is ready
    with serve(tmp, env, "--cors-origins", ui_url, *extra, workers=1, timeout_s=600) as server:
        (tmp / "server.log").symlink_to(server.log)
        log(f"fastcrag serve on {server.url} (ready in {server.start_s:.0f} s, log {server.log})")
        yield server.url


@contextlib.contextmanager
def chat_ui(ui_dir: Path, port: int, server_url: str, tmp: Path) -> Iterator[str]:
    """The URL of the built Agent Chat UI (`next start` on `port`, forwarding `/api` to `server_url`)."""
    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1", "LANGGRAPH_API_URL": server_url, "LANGSMITH_API_KEY": ""}
    cmd = [str(ui_dir / "node_modules" / ".bin" / "next"), "start", "-H", "127.0.0.1", "-p", str(port)]
    with launch(cmd, port, tmp / "ui.log", env=env, cwd=ui_dir, ready=page_answers, timeout_s=90) as ui:
        log(f"Agent Chat UI (next start) on {ui.url} (log {ui.log})")
        yield ui.url


# ----------------------------------------------------------------------------------------------------- browser


PAGE_STATE_JS = r"""
() => {
  const buttons = [...document.querySelectorAll('button')];
  const ta = document.querySelector('textarea');
  const side = [...document.querySelectorAll('h1')].find(h => h.textContent.trim() === 'Thread History');
  return {
    ready: !!ta,
    loading: buttons.some(b => b.textContent.trim() === 'Cancel'),
    human: document.querySelectorAll('div.group.ml-auto').length,
    ai: [...document.querySelectorAll('div.group.mr-auto')].filter(d => d.innerText.trim().length > 0).length,
    sidebar: side ? side.parentElement.parentElement.innerText : null,
    toasts: [...document.querySelectorAll('[data-sonner-toast]')].map(t => t.innerText),
    url: location.href,
    text: document.body.innerText,
  };
}
"""


class Observed:
    """What the browser saw: every request (method, URL, body, status or failure) and its errors."""

    def __init__(self, page: Any) -> None:
        """Listen to `page`'s requests, responses, failures, console errors and warnings, and exceptions."""
        self.requests: dict[int, dict[str, Any]] = {}
        self.errors: list[str] = []
        page.on("request", self._request)
        page.on("response", lambda r: self._entry(r.request).update(status=r.status))
        page.on("requestfailed", lambda r: self._entry(r).update(failed=(r.failure or "failed")))  # r: a Request
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page exception: {str(exc)[:400]}"))

    def _request(self, request: Any) -> None:
        self.requests[id(request)] = {"method": request.method, "url": request.url, "body": request.post_data}

    def _entry(self, request: Any) -> dict[str, Any]:
        return self.requests.setdefault(id(request), {"method": request.method, "url": request.url, "body": None})

    def _console(self, msg: Any) -> None:
        if msg.type in ("error", "warning"):
            self.errors.append(f"console.{msg.type}: {msg.text[:400]}")

    def summary(self, interesting: str) -> tuple[list[str], list[str]]:
        """(every request to the API, the failures: failed or >= 400 requests and the page's errors)."""
        lines: list[str] = []
        failures = list(self.errors)
        for r in self.requests.values():
            if interesting not in r["url"]:
                continue
            status = r.get("status", "-")
            failed = r.get("failed")
            # the SDK aborts a stream once it has read its last event: cancelled by the page, not a failure
            cancelled = failed == "net::ERR_ABORTED"
            line = f"{r['method']} {r['url']} -> {status}"
            line += " (then cancelled by the page)" if cancelled else (f" FAILED {failed}" if failed else "")
            body = (r["body"] or "")[:300]
            line += f"  body={body}" if body else ""
            lines.append(line)
            if (failed and not cancelled) or (isinstance(status, int) and status >= 400):
                failures.append(line)
        return lines, failures

    def write(self, path: Path) -> None:
        """Write the requests and errors as JSON lines."""
        rows = [{"request": r} for r in self.requests.values()] + [{"error": e} for e in self.errors]
        path.write_text("\n".join(json.dumps(row) for row in rows))


def words(text: str) -> set[str]:
    """The lower-cased words of 4+ letters (to compare an answer with the rendered page)."""
    return {w.lower() for w in re.findall(r"[A-Za-z_]{4,}", text)}


def message_text(msg: Any) -> str:
    """A message's text, whether its content is a string or a list of blocks."""
    content = msg.get("content") if isinstance(msg, dict) else getattr(msg, "content", "")
    if isinstance(content, list):
        return " ".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(content or "")


def poll(
    page: Any, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str, idle_give_up: float | None = None
) -> dict[str, Any]:
    """Read the page's state until `pred(state)`; raise TimeoutError naming `what` and the last state.

    With `idle_give_up`, stop once the UI has not been loading for that many seconds in a row (it gave up: a request
    failed).
    """
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    idle_since: float | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the page may be navigating: read it again
            state = page.evaluate(PAGE_STATE_JS) or {}
            if pred(state):
                return state
            if state.get("loading"):
                idle_since = None
            elif idle_give_up is not None:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > idle_give_up:
                    break
        time.sleep(0.5)
    raise TimeoutError(
        f"gave up after {timeout if idle_since is None else idle_give_up:.0f} s waiting for {what}"
        + ("" if idle_since is None else " (the UI stopped loading without it: see the failed requests)")
        + "; page state: "
        + json.dumps({k: v for k, v in state.items() if k != "text"})
        + f"; page text: {state.get('text', '')[:600]!r}"
    )


def conversation(page: Any, client: Any, turn_timeout: float, result: dict[str, Any]) -> None:
    """Hold both turns, then reload on the thread; record each check in `result`."""
    poll(page, lambda s: bool(s.get("ready")), 60, "the chat input")
    state: dict[str, Any] = {}
    for turn, question in enumerate(QUESTIONS, start=1):
        page.locator("textarea").fill(question)
        page.locator("form button[type=submit]", has_text="Send").click()
        log(f"turn {turn}: sent {question!r}")
        t0 = time.monotonic()

        def answered(s: dict[str, Any], n: int = turn) -> bool:
            return bool(s.get("ai", 0) >= n and s.get("human", 0) >= n and not s.get("loading"))

        state = poll(
            page,
            answered,
            turn_timeout,
            f"answer {turn}",
            idle_give_up=10,
        )
        log(f"turn {turn}: answered in {time.monotonic() - t0:.1f} s ({state['ai']} AI / {state['human']} human shown)")
        if state.get("toasts"):
            log(f"turn {turn}: toasts: {state['toasts']}")
        tid = urllib.parse.parse_qs(urllib.parse.urlparse(state["url"]).query).get("threadId", [None])[0]
        result["thread_id"] = tid
        if not tid:
            raise RuntimeError(f"turn {turn}: the page URL has no threadId: {state['url']}")
        msgs = client.threads.get_state(tid)["values"].get("messages", [])
        answer = message_text(msgs[-1]) if msgs else ""
        result["answers"].append(answer)
        want = words(answer)
        cover = len(want & words(state["text"])) / max(1, len(want))
        ok = bool(answer) and cover >= 0.8 and question in state["text"]
        result["checks"][f"turn {turn}: question and answer shown ({cover:.0%} of the answer's words)"] = ok
        log(f"turn {turn}: answer {answer[:160]!r}... shown: {cover:.0%} of its words")

    # reload on the thread: the UI loads it back from the server and lists it in the sidebar
    page.goto(state["url"] if "chatHistoryOpen" in state["url"] else state["url"] + "&chatHistoryOpen=true")
    for name, pred, timeout in (
        (
            "after reload: both turns loaded back from the server",
            lambda s: s.get("ai", 0) >= 2 and s.get("human", 0) >= 2 and all(q in s["text"] for q in QUESTIONS),
            60,
        ),
        (
            "after reload: the thread is listed in Thread History (threads.search by graph_id)",
            lambda s: bool(s.get("sidebar")) and QUESTIONS[0] in s["sidebar"],
            15,
        ),
    ):
        try:
            state = poll(page, pred, timeout, name)
            result["checks"][name] = True
        except TimeoutError as exc:
            log(str(exc)[:400])
            result["checks"][name] = False
    result["sidebar"] = state.get("sidebar")


def sdk_client(server_url: str, token: str | None) -> Any:
    """A `langgraph_sdk` client of the server, sending `token` as a bearer token when given."""
    from langgraph_sdk import get_sync_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    return get_sync_client(url=server_url, api_key=None, headers=headers)


def browser_session(args: argparse.Namespace, page_url: str, server_url: str) -> dict[str, Any]:
    """Drive the UI through both turns in headless Chromium; returns what was observed."""
    from playwright.sync_api import sync_playwright

    client = sdk_client(server_url, args.token)
    result: dict[str, Any] = {"checks": {}, "answers": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            if args.token:  # the UI's API key: what its settings form stores, sent as X-Api-Key
                page.add_init_script(f"window.localStorage.setItem('lg:chat:apiKey', {json.dumps(args.token)})")
            seen = Observed(page)
            log(f"browser: {page_url}")
            page.goto(page_url)
            try:
                conversation(page, client, args.turn_timeout, result)
            except Exception as exc:
                log(f"browser session failed: {type(exc).__name__}: {exc}")
                result["checks"]["browser session"] = False
            finally:
                path = Path(args.screenshot)
                path.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(path))
                log(f"screenshot: {path}")
                interesting = "/api/" if args.mode == "proxy" else server_url
                result["requests"], result["failures"] = seen.summary(interesting)
                if args.events:
                    seen.write(Path(args.events))
        finally:
            browser.close()
    return result


def sdk_check(server_url: str, thread_id: str, token: str | None = None) -> tuple[bool, str]:
    """Whether `threads.search` (by graph_id, as the UI asks) returns the thread with human/ai/human/ai."""
    client = sdk_client(server_url, token)
    found = client.threads.search(metadata={"graph_id": "crag"}, limit=100)
    mine = [t for t in found if t["thread_id"] == thread_id]
    if not mine:
        every = [t for t in client.threads.search(limit=1000) if t["thread_id"] == thread_id]
        held: Any = (every[0].get("values") or {}) if every else {}
        kinds = [m.get("type") for m in held.get("messages", [])]
        return False, (
            f"threads.search(metadata={{'graph_id': 'crag'}}) (the UI's query) did not return {thread_id} "
            f"({len(found)} threads); without the filter it is "
            + (f"there with {len(kinds)} messages {kinds}, metadata {every[0].get('metadata')}" if every else "missing")
        )
    values: Any = mine[0].get("values") or {}
    msgs = values.get("messages", [])
    if not msgs:
        state: Any = client.threads.get_state(thread_id)["values"]
        msgs = state.get("messages", [])
    kinds = [m.get("type") for m in msgs]
    ok = kinds == ["human", "ai", "human", "ai"]
    return ok, f"thread {thread_id}: {len(msgs)} messages {kinds}, metadata {mine[0].get('metadata')}"


# ----------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--ui-dir", default="runs/agent-chat-ui/app", help="the Agent Chat UI work tree (built with --build)"
    )
    ap.add_argument("--build", action="store_true", help="fetch/install/build the UI into --ui-dir when not built yet")
    ap.add_argument("--rebuild", action="store_true", help="with --build: install and build again")
    ap.add_argument("--ui-source", help="with --build: a local git clone of the UI to unpack instead of cloning it")
    ap.add_argument(
        "--mode",
        choices=("direct", "proxy"),
        default="direct",
        help="direct: browser -> fastcrag serve (needs CORS); proxy: browser -> UI /api -> server",
    )
    ap.add_argument(
        "--server-url",
        help="use this running LangGraph server (no API key) instead of starting "
        "`fastcrag serve`; threads it already holds are left alone",
    )
    ap.add_argument(
        "--per-user",
        action="store_true",
        help="serve with a langgraph.json auth handler (two users with tokens): the UI must show only its user's "
        "threads (direct mode)",
    )
    ap.add_argument("--screenshot", default=str(REPO / "runs" / "chat-ui.png"))
    ap.add_argument("--chromium", default=chromium_path(), help="the Chromium binary (default: Debian's)")
    ap.add_argument("--turn-timeout", type=float, default=240.0, help="seconds to wait for each answer")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs, checkpoints)")
    ap.add_argument("--events", help="write the browser's requests and errors (JSON lines) to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every API request the browser made")
    args = ap.parse_args(argv)
    if args.per_user and (args.mode != "direct" or args.server_url):
        ap.error("--per-user starts its own server and works in --mode direct")
    args.token = secrets.token_urlsafe(24) if args.per_user else None
    args.other_token = secrets.token_urlsafe(24) if args.per_user else None
    return args


def other_users_thread(server_url: str, token: str) -> str:
    """Another user's conversation (`--per-user`), made before the session: its thread id."""
    other = sdk_client(server_url, token)
    thread_id = str(other.threads.create()["thread_id"])
    other.runs.wait(thread_id, "crag", input={"messages": [{"role": "user", "content": OTHER_QUESTION}]})
    log(f"the other user's thread {thread_id}: {OTHER_QUESTION!r}")
    return thread_id


def per_user_checks(result: dict[str, Any], server_url: str, args: argparse.Namespace, other_thread: str) -> None:
    """Record that neither the UI nor the user's `threads.search` shows the other user's thread, and back."""
    import httpx

    sidebar = result.get("sidebar") or ""
    result["checks"]["per user: the other user's thread is not in the UI's Thread History"] = bool(sidebar) and (
        OTHER_QUESTION not in sidebar
    )
    found = [t["thread_id"] for t in sdk_client(server_url, args.token).threads.search(limit=1000)]
    result["checks"]["per user: the user's threads.search has only their own threads"] = (
        other_thread not in found and result.get("thread_id") in found
    )
    status = None
    if result.get("thread_id"):
        try:
            sdk_client(server_url, args.other_token).threads.get(result["thread_id"])
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
    result["checks"]["per user: the other user cannot read the UI's thread (404)"] = status == 404


def report(result: dict[str, Any], ok: bool, verbose: bool, tmp: Path) -> None:
    """Print each check, and on failure (or `verbose`) the requests, failures and the logs' tails."""
    print()
    for name, passed in result["checks"].items():
        print(f"  {'PASS' if passed else 'FAIL'}  {name}")
    if ok and not verbose:
        return
    print("\nAPI requests the browser made:")
    for line in result.get("requests", []):
        print("  " + line)
    print("\nfailures seen by the browser:")
    for line in result.get("failures", []):
        print("  " + line)
    for name, tail in (("server.log", 40), ("ui.log", 20)):
        path = tmp / name
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        print(f"\n{name} (last lines, {path}):")
        print("  " + "\n  ".join(text.splitlines()[-tail:]))


def main(argv: list[str] | None = None) -> int:
    """Build (optionally), start the server and the UI, run the browser check, stop everything."""
    args = parse_args(argv)
    ui_dir = Path(args.ui_dir).resolve()
    if args.build:
        build_ui(ui_dir, args.rebuild, Path(args.ui_source).resolve() if args.ui_source else None)
    if not (ui_dir / ".next" / "BUILD_ID").exists():
        log(f"no built UI in {ui_dir}: run with --build (see the top of this script)")
        return 2
    if args.chromium is None:
        log("no chromium: bash scripts/install-browser.sh installs Debian's chromium and playwright")
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="chat-ui-check-"))
    ui_port = free_port()
    ui_origin = f"http://127.0.0.1:{ui_port}"
    result: dict[str, Any] = {"checks": {}}
    ok = False
    try:
        with fastcrag_server(args, tmp, ui_origin) as server_url, chat_ui(ui_dir, ui_port, server_url, tmp) as ui_url:
            api_url = server_url if args.mode == "direct" else f"{ui_url}/api"
            query = urllib.parse.urlencode({"apiUrl": api_url, "assistantId": "crag", "chatHistoryOpen": "true"})
            other_thread = other_users_thread(server_url, args.other_token) if args.per_user else ""
            try:
                result = browser_session(args, f"{ui_url}/?{query}", server_url)
            except Exception as exc:
                log(f"browser session failed: {type(exc).__name__}: {exc}")
                result["checks"]["browser session"] = False
            name = "langgraph_sdk threads.search: the thread with 4 messages"
            result["checks"][name] = False
            if result.get("thread_id"):
                result["checks"][name], detail = sdk_check(server_url, result["thread_id"], args.token)
                log(detail)
            if args.per_user:
                per_user_checks(result, server_url, args, other_thread)
            ok = all(result["checks"].values()) and len(result["checks"]) >= 4
            report(result, ok, args.verbose, tmp)
        verdict = "OK" if ok else "FAILED"
        print(f"\n{verdict}: Agent Chat UI ({args.mode}) <-> fastcrag serve; screenshot {args.screenshot}")
    except ServerStartError as exc:
        log(f"a server did not start: {exc}")
        return 1
    finally:
        if args.keep or not ok:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Real chat front-end in a real browser: the Agent Chat UI holds a two-turn conversation with `fastcrag serve`.

What it does
------------
1. starts `fastcrag serve` (1 worker, a free loopback port, no API key, SQLite checkpoints in a temp folder,
   HF_HUB_OFFLINE=1, FASTRAG_LLM=extractive);
2. starts the built Agent Chat UI (`next start`, a free loopback port);
3. opens it in headless Chromium (/usr/bin/chromium, driven over the Chrome DevTools protocol with the
   `websockets` package; no Playwright), with `?apiUrl=...&assistantId=crag&chatHistoryOpen=true`;
4. sends "How does the with statement work?", waits for the answer, then "What does the global statement do?",
   waits again, and checks that both answers (read back from the thread's state) are shown in the page;
5. reloads the page on the thread (the UI loads it back from the server) and checks that the
   "Thread History" sidebar lists it (`threads.search` by `graph_id` metadata, first message as title);
6. checks with `langgraph_sdk` that `threads.search` finds the thread with 4 messages (human, ai, human, ai);
7. saves a screenshot (`--screenshot`, default runs/chat-ui.png) and stops everything it started.

Exit status 0 when every check passed, 1 otherwise; the server and UI logs, the failed requests the browser saw
(method, URL, status, CORS errors) and the console errors are printed on failure (and with -v).

Two ways the UI reaches the server (`--mode`):
- `direct` (default): the browser calls fastcrag serve itself (`apiUrl=http://127.0.0.1:SERVER`), the way the UI
  is meant to talk to a LangGraph server (NEXT_PUBLIC_API_URL / the setup form). The UI runs on another origin,
  so the server is started with `--cors-origins <the UI's origin>` (preflights answered, Content-Location exposed).
- `proxy`: the browser calls the UI's own `/api` route (langgraph-nextjs-api-passthrough, same origin), which
  forwards to `LANGGRAPH_API_URL=http://127.0.0.1:SERVER` server-side; no CORS needed.

Building the UI (done once; `--build` does exactly this, into `--ui-dir`, default runs/agent-chat-ui/app)
-------------------------------------------------------------------------------------------------
The UI is https://github.com/langchain-ai/agent-chat-ui (checked with commit fdc87e6, Next 15.5.21,
@langchain/langgraph-sdk 1.8.10). It lives OUTSIDE this repository:

    mkdir -p runs/agent-chat-ui/app
    git -C /work/.mirror/langchain-ai+agent-chat-ui/repo archive HEAD | tar -x -C runs/agent-chat-ui/app
        # (or: git clone --depth 1 https://github.com/langchain-ai/agent-chat-ui runs/agent-chat-ui/app)
    cd runs/agent-chat-ui/app
    npx -y pnpm@10.5.1 install --frozen-lockfile                     # about 30 s
    NEXT_TELEMETRY_DISABLED=1 NEXT_PUBLIC_ASSISTANT_ID=crag \
      NEXT_FONT_GOOGLE_MOCKED_RESPONSES=$PWD/../font-mock.cjs \
      npx next build --no-lint                                       # about 90 s on 2 busy cores

`font-mock.cjs` (written by --build next to the app folder) stands in for Google Fonts: the layout uses
next/font/google (Inter), which `next build` downloads, and there is no internet here; with the mock the page
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
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from fastcrag.evaluation.launch import free_port

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path("/work/.mirror/langchain-ai+agent-chat-ui/repo")
UI_GIT_URL = "https://github.com/langchain-ai/agent-chat-ui"
PNPM = "pnpm@10.5.1"
QUESTIONS = ("How does the with statement work?", "What does the global statement do?")
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


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def wait_http(url: str, timeout: float, proc: subprocess.Popen, what: str) -> None:
    """Wait until `url` answers below 500, failing early when `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before answering {url}")
        with contextlib.suppress(OSError):
            status, _ = http_get(url, timeout=2)
            if status < 500:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f} s")


# ----------------------------------------------------------------------------------------------------- build


def run_step(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run one build command (output shown), returning its seconds."""
    log(f"$ (cd {cwd} && {' '.join(cmd)})")
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, check=True)
    took = time.monotonic() - t0
    log(f"  took {took:.0f} s")
    return took


def build_ui(ui_dir: Path, force: bool) -> None:
    """Fetch the Agent Chat UI into ui_dir (if empty), install its packages and `next build` it."""
    font_mock = ui_dir.parent / "font-mock.cjs"
    if not (ui_dir / "package.json").exists():
        ui_dir.mkdir(parents=True, exist_ok=True)
        if MIRROR.exists():
            log(f"unpacking {MIRROR} HEAD into {ui_dir}")
            archive = subprocess.run(["git", "-C", str(MIRROR), "archive", "HEAD"], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(ui_dir)], input=archive.stdout, check=True)
        else:
            ui_dir.rmdir()
            run_step(["git", "clone", "--depth", "1", UI_GIT_URL, str(ui_dir)], cwd=ui_dir.parent)
    font_mock.write_text(FONT_MOCK)
    if force or not (ui_dir / "node_modules" / ".bin" / "next").exists():
        run_step(["npx", "-y", PNPM, "install", "--frozen-lockfile"], cwd=ui_dir)
    if force or not (ui_dir / ".next" / "BUILD_ID").exists():
        run_step(
            ["npx", "next", "build", "--no-lint"],
            cwd=ui_dir,
            env={
                "NEXT_TELEMETRY_DISABLED": "1",
                "NEXT_PUBLIC_ASSISTANT_ID": "crag",
                "NEXT_FONT_GOOGLE_MOCKED_RESPONSES": str(font_mock),
            },
        )
    else:
        log(f"{ui_dir}/.next already built (use --rebuild to build again)")


# ----------------------------------------------------------------------------------------------------- CDP


class CDP:
    """A minimal Chrome DevTools protocol client over one page target's websocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.events: list[dict] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut and not fut.done():
                    if "error" in msg:
                        fut.set_exception(RuntimeError(f"CDP error: {msg['error']}"))
                    else:
                        fut.set_result(msg.get("result", {}))
            else:
                self.events.append(msg)

    async def send(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        """Call a CDP method and return its result."""
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return await asyncio.wait_for(fut, timeout)

    async def js(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate `expression` in the page and return its JSON value."""
        res = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")


PAGE_STATE_JS = r"""
(() => {
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
})()
"""

SEND_JS = r"""
(() => {
  const b = [...document.querySelectorAll('form button[type=submit]')].find(b => b.textContent.trim() === 'Send');
  if (!b) return 'no Send button';
  if (b.disabled) return 'Send button disabled';
  b.click();
  return 'ok';
})()
"""


def summarize_network(events: list[dict], interesting: str) -> tuple[list[str], list[str]]:
    """(every request to the API, failed ones) from the collected Network/Log/Runtime events."""
    requests: dict[str, dict] = {}
    lines: list[str] = []
    failures: list[str] = []
    for ev in events:
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Network.requestWillBeSent":
            req = p["request"]
            requests[p["requestId"]] = {"method": req["method"], "url": req["url"], "body": req.get("postData")}
        elif m == "Network.responseReceived":
            r = requests.get(p["requestId"])
            if r is not None:
                r["status"] = p["response"]["status"]
        elif m == "Network.loadingFailed":
            r = requests.get(p["requestId"])
            if r is not None and p.get("canceled"):
                r["cancelled"] = True  # the page aborted it (the SDK does once a stream's last event is read)
            elif r is not None:
                r["failed"] = f"{p.get('errorText')} {p.get('corsErrorStatus') or p.get('blockedReason') or ''}".strip()
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            failures.append(f"console.{p['type']}: {args[:400]}")
        elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
            e = p["entry"]
            failures.append(f"browser {e['level']}: {e.get('text', '')[:400]} {e.get('url', '')}")
        elif m == "Runtime.exceptionThrown":
            failures.append(
                f"page exception: {p['exceptionDetails'].get('exception', {}).get('description', '')[:400]}"
            )
    for r in requests.values():
        if interesting not in r["url"]:
            continue
        status = r.get("status", "-")
        body = (r["body"] or "")[:300]
        line = f"{r['method']} {r['url']} -> {status}{' FAILED ' + r['failed'] if 'failed' in r else ''}"
        line += " (then cancelled by the page)" if r.get("cancelled") else ""
        lines.append(line + (f"  body={body}" if body else ""))
        if "failed" in r or (isinstance(status, int) and status >= 400):
            failures.append(line + (f"  body={body}" if body else ""))
    return lines, failures


def words(text: str) -> set[str]:
    """The lower-cased words of 4+ letters (to compare an answer with the rendered page)."""
    return {w.lower() for w in re.findall(r"[A-Za-z_]{4,}", text)}


def message_text(msg: Any) -> str:
    """A message's text, whether its content is a string or a list of blocks."""
    content = msg.get("content") if isinstance(msg, dict) else getattr(msg, "content", "")
    if isinstance(content, list):
        return " ".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(content or "")


async def browser_session(args: argparse.Namespace, ws_url: str, page_url: str, server_url: str) -> dict:
    """Drive the UI through both turns; returns what was observed."""
    import websockets
    from langgraph_sdk import get_client

    client = get_client(url=server_url)
    interesting = "/api/" if args.mode == "proxy" else server_url
    result: dict[str, Any] = {"checks": {}, "answers": []}
    async with websockets.connect(ws_url, max_size=64 * 1024 * 1024) as ws:
        cdp = CDP(ws)
        for domain in ("Page", "Runtime", "Network", "Log"):
            await cdp.send(f"{domain}.enable")
        await cdp.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
        )
        log(f"browser: {page_url}")
        await cdp.send("Page.navigate", {"url": page_url})

        async def poll(pred, timeout: float, what: str, idle_give_up: float | None = None) -> dict:
            """Poll the page until `pred(state)`.

            With idle_give_up, stop once the UI has not been loading for that many seconds in a row
            (it gave up: a request failed).
            """
            deadline = time.monotonic() + timeout
            state: dict = {}
            idle_since = None
            while time.monotonic() < deadline:
                with contextlib.suppress(RuntimeError, asyncio.TimeoutError):
                    state = await cdp.js(PAGE_STATE_JS) or {}
                    if pred(state):
                        return state
                    if state.get("loading"):
                        idle_since = None
                    elif idle_give_up is not None:
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > idle_give_up:
                            break
                await asyncio.sleep(0.5)
            raise TimeoutError(
                f"gave up after {timeout if idle_since is None else idle_give_up:.0f} s waiting for {what}"
                + ("" if idle_since is None else " (the UI stopped loading without it: see the failed requests)")
                + "; page state: "
                + json.dumps({k: v for k, v in state.items() if k != "text"})
                + f"; page text: {state.get('text', '')[:600]!r}"
            )

        try:
            await poll(lambda s: s.get("ready"), 60, "the chat input")
            for turn, question in enumerate(QUESTIONS, start=1):
                await cdp.js("document.querySelector('textarea').focus()")
                await cdp.send("Input.insertText", {"text": question})
                await asyncio.sleep(0.3)
                sent = await cdp.js(SEND_JS)
                if sent != "ok":
                    raise RuntimeError(f"turn {turn}: could not send: {sent}")
                log(f"turn {turn}: sent {question!r}")
                t0 = time.monotonic()
                state = await poll(
                    lambda s, n=turn: s.get("ai", 0) >= n and s.get("human", 0) >= n and not s.get("loading"),
                    args.turn_timeout,
                    f"answer {turn}",
                    idle_give_up=10,
                )
                log(
                    f"turn {turn}: answered in {time.monotonic() - t0:.1f} s "
                    f"({state['ai']} AI / {state['human']} human messages shown)"
                )
                if state.get("toasts"):
                    log(f"turn {turn}: toasts: {state['toasts']}")
                tid = urllib.parse.parse_qs(urllib.parse.urlparse(state["url"]).query).get("threadId", [None])[0]
                result["thread_id"] = tid
                if not tid:
                    raise RuntimeError(f"turn {turn}: the page URL has no threadId: {state['url']}")
                st = await client.threads.get_state(tid)
                msgs = st["values"].get("messages", [])
                answer = message_text(msgs[-1]) if msgs else ""
                result["answers"].append(answer)
                want = words(answer)
                seen = words(state["text"])
                cover = len(want & seen) / max(1, len(want))
                ok = bool(answer) and cover >= 0.8 and question in state["text"]
                result["checks"][f"turn {turn}: question and answer shown ({cover:.0%} of the answer's words)"] = ok
                log(f"turn {turn}: answer {answer[:160]!r}... shown: {cover:.0%} of its words")

            # reload on the thread: the UI loads it back from the server and lists it in the sidebar
            reload_url = state["url"] if "chatHistoryOpen" in state["url"] else state["url"] + "&chatHistoryOpen=true"
            await cdp.send("Page.navigate", {"url": reload_url})
            await asyncio.sleep(1)
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
                    state = await poll(pred, timeout, name)
                    result["checks"][name] = True
                except TimeoutError as exc:
                    log(str(exc)[:400])
                    result["checks"][name] = False
            result["sidebar"] = state.get("sidebar")
        except Exception as exc:
            log(f"browser session failed: {type(exc).__name__}: {exc}")
            result["checks"]["browser session"] = False
        finally:
            shot = await cdp.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
            path = Path(args.screenshot)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(shot["data"]))
            log(f"screenshot: {path}")
            lines, failures = summarize_network(cdp.events, interesting)
            result["requests"], result["failures"] = lines, failures
            cdp.reader.cancel()
            if args.events:
                Path(args.events).write_text("\n".join(json.dumps(e) for e in cdp.events))
    return result


async def sdk_check(server_url: str, thread_id: str) -> tuple[bool, str]:
    """Whether `threads.search` (by graph_id, as the UI asks) returns the thread with human/ai/human/ai."""
    from langgraph_sdk import get_client

    client = get_client(url=server_url)
    found = await client.threads.search(metadata={"graph_id": "crag"}, limit=100)
    mine = [t for t in found if t["thread_id"] == thread_id]
    if not mine:
        every = [t for t in await client.threads.search(limit=1000) if t["thread_id"] == thread_id]
        kinds = [m.get("type") for m in ((every[0].get("values") or {}).get("messages", []) if every else [])]
        return False, (
            f"threads.search(metadata={{'graph_id': 'crag'}}) (the UI's query) did not return {thread_id} "
            f"({len(found)} threads); without the filter it is "
            + (f"there with {len(kinds)} messages {kinds}, metadata {every[0].get('metadata')}" if every else "missing")
        )
    msgs = (mine[0].get("values") or {}).get("messages", [])
    if not msgs:
        state = await client.threads.get_state(thread_id)
        msgs = state["values"].get("messages", [])
    kinds = [m.get("type") for m in msgs]
    ok = kinds == ["human", "ai", "human", "ai"]
    return ok, f"thread {thread_id}: {len(msgs)} messages {kinds}, metadata {mine[0].get('metadata')}"


# ----------------------------------------------------------------------------------------------------- main


def start(cmd: list[str], cwd: Path, env: dict[str, str], logfile: Path) -> subprocess.Popen:
    """Start a process in its own session, output to `logfile`."""
    fh = open(logfile, "wb")
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen | None, what: str) -> None:
    """Stop a process started by `start` (its whole process group), TERM then KILL."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    log(f"stopped {what}")


def main() -> int:
    """Build (optionally), start everything, run the browser check, stop everything."""
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--ui-dir", default="runs/agent-chat-ui/app", help="the Agent Chat UI work tree (built with --build)"
    )
    ap.add_argument("--build", action="store_true", help="fetch/install/build the UI into --ui-dir when not built yet")
    ap.add_argument("--rebuild", action="store_true", help="with --build: install and build again")
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
    ap.add_argument("--screenshot", default=str(REPO / "runs" / "chat-ui.png"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--turn-timeout", type=float, default=240.0, help="seconds to wait for each answer")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs, checkpoints)")
    ap.add_argument("--events", help="write the browser's DevTools events (JSON lines) to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every API request the browser made")
    args = ap.parse_args()

    ui_dir = Path(args.ui_dir).resolve()
    if args.build:
        build_ui(ui_dir, args.rebuild)
    if not (ui_dir / ".next" / "BUILD_ID").exists():
        log(f"no built UI in {ui_dir}: run with --build (see the top of this script)")
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="chat-ui-check-"))
    server = ui = browser = None
    server_port, ui_port = free_port(), free_port()
    server_url, ui_url = f"http://127.0.0.1:{server_port}", f"http://127.0.0.1:{ui_port}"
    if args.server_url:
        server_url = args.server_url.rstrip("/")
    ok = False
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_API_KEY")}
        env.update(HF_HUB_OFFLINE="1", FASTRAG_LLM="extractive", FASTRAG_CHECKPOINTS=str(tmp / "threads.sqlite"))
        fastcrag = Path(sys.executable).with_name("fastcrag")
        if args.server_url:
            (tmp / "server.log").write_text(f"(server at {server_url} not started by this script)\n")
            log(f"using the running server {server_url}")
        else:
            server = start(
                [str(fastcrag), "serve", "--port", str(server_port), "--workers", "1", "--cors-origins", ui_url],
                tmp,
                env,
                tmp / "server.log",
            )
            log(f"fastcrag serve on {server_url} (log {tmp / 'server.log'})")

        ui_env = {
            **os.environ,
            "NEXT_TELEMETRY_DISABLED": "1",
            "LANGGRAPH_API_URL": server_url,
            "LANGSMITH_API_KEY": "",
        }
        ui = start(
            [str(ui_dir / "node_modules" / ".bin" / "next"), "start", "-H", "127.0.0.1", "-p", str(ui_port)],
            ui_dir,
            ui_env,
            tmp / "ui.log",
        )
        log(f"Agent Chat UI (next start) on {ui_url} (log {tmp / 'ui.log'})")
        if server is not None:
            wait_http(f"{server_url}/ok", 180, server, "fastcrag serve")
        wait_http(f"{ui_url}/", 90, ui, "next start")

        profile = tmp / "chromium-profile"
        browser = start(
            [
                args.chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}",
                "--window-size=1400,1000",
                "about:blank",
            ],
            tmp,
            dict(os.environ),
            tmp / "chromium.log",
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if time.monotonic() > deadline or browser.poll() is not None:
                raise RuntimeError(f"chromium did not start: {(tmp / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.2)
        cdp_port = int(port_file.read_text().splitlines()[0])
        targets = json.loads(http_get(f"http://127.0.0.1:{cdp_port}/json/list")[1])
        page = next(t for t in targets if t.get("type") == "page")

        api_url = server_url if args.mode == "direct" else f"{ui_url}/api"
        page_url = f"{ui_url}/?" + urllib.parse.urlencode(
            {"apiUrl": api_url, "assistantId": "crag", "chatHistoryOpen": "true"}
        )
        result: dict[str, Any] = {"checks": {}}
        try:
            result = asyncio.run(browser_session(args, page["webSocketDebuggerUrl"], page_url, server_url))
        except Exception as exc:
            log(f"browser session failed: {type(exc).__name__}: {exc}")
            result.setdefault("checks", {})["browser session"] = False
        if result.get("thread_id"):
            sdk_ok, detail = asyncio.run(sdk_check(server_url, result["thread_id"]))
            result["checks"]["langgraph_sdk threads.search: the thread with 4 messages"] = sdk_ok
            log(detail)
        else:
            result["checks"]["langgraph_sdk threads.search: the thread with 4 messages"] = False
        ok = all(result["checks"].values()) and len(result["checks"]) >= 4
        print()
        for name, passed in result["checks"].items():
            print(f"  {'PASS' if passed else 'FAIL'}  {name}")
        if args.verbose or not ok:
            print("\nAPI requests the browser made:")
            for line in result.get("requests", []):
                print("  " + line)
            print("\nfailures seen by the browser:")
            for line in result.get("failures", []):
                print("  " + line)
            print(f"\nserver log (last lines, {tmp / 'server.log'}):")
            print("  " + "\n  ".join((tmp / "server.log").read_text(errors="replace").splitlines()[-40:]))
            print(f"\nUI log (last lines, {tmp / 'ui.log'}):")
            print("  " + "\n  ".join((tmp / "ui.log").read_text(errors="replace").splitlines()[-20:]))
        print(
            f"\n{'OK' if ok else 'FAILED'}: Agent Chat UI ({args.mode}) <-> fastcrag serve; "
            f"screenshot {args.screenshot}"
        )
    finally:
        stop(browser, "chromium")
        stop(ui, "next start")
        stop(server, "fastcrag serve")
        if args.keep or not ok:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

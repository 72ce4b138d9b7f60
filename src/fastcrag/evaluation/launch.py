"""Start a served `crag` graph as a subprocess on a free loopback port, wait until it answers, stop it.

Used by `python -m lab bench-speed` (served vs in-process latency, cold start) and by the integration tests, for both
servers: `fastcrag serve` (ready once every worker has logged that it is) and `langgraph dev` (ready once `/ok`
answers; run in a folder holding `langgraph.json`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

#: The environment a benchmark or test server runs with: no network, no analytics, no tracing.
OFFLINE_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_API_KEY": "",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class ServerStartError(RuntimeError):
    """The server exited or did not become ready in time; the message ends with its log's tail."""


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fastcrag_command() -> list[str]:
    """The `fastcrag` CLI of this interpreter's environment."""
    exe = Path(sys.executable).parent / "fastcrag"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fastcrag.cli"]


def langgraph_command() -> list[str] | None:
    """The `langgraph` CLI (langgraph-cli[inmem]), or None when it is not installed."""
    exe = Path(sys.executable).parent / "langgraph"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("langgraph")
    return [found] if found else None


class ServerProcess:
    """A running server: its process, base URL, log file and how long it took to become ready."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        """Wrap a started process (`start_s` is set once it is ready)."""
        self.proc = proc
        self.url = url
        self.log = log
        self.start_s = 0.0

    def log_text(self) -> str:
        """Everything the server has written so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")


def _answers_ok(server: ServerProcess) -> bool:
    import httpx  # about 0.2 s: the CLI imports this module (through bench-speed) for its parser

    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{server.url}/ok", timeout=2.0).status_code == 200
    return False


@contextlib.contextmanager
def launch(
    cmd: Sequence[str],
    port: int,
    log: Path,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    ready: Callable[[ServerProcess], bool] = _answers_ok,
    timeout_s: float = 300.0,
) -> Iterator[ServerProcess]:
    """Run `cmd` (which must listen on `port`) in its own session; yield once `ready`; stop it and its children.

    Raises:
        ServerStartError: the process exited, or was not ready after `timeout_s`.
    """
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log)
    try:
        while not ready(server):
            if proc.poll() is not None:
                raise ServerStartError(
                    f"{cmd[-1]!r} server exited with {proc.returncode}:\n{server.log_text()[-4000:]}"
                )
            if time.perf_counter() - started > timeout_s:
                raise ServerStartError(f"server not ready after {timeout_s:.0f} s:\n{server.log_text()[-4000:]}")
            time.sleep(0.05)
        server.start_s = time.perf_counter() - started
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def serve(
    log_dir: Path, env: Mapping[str, str], *args: str, workers: int = 2, timeout_s: float = 300.0
) -> contextlib.AbstractContextManager[ServerProcess]:
    """`fastcrag serve --workers N ARGS` on a free port, ready once every worker has logged that it is."""
    port = free_port()

    def all_workers(server: ServerProcess) -> bool:
        return server.log_text().count(" ready: graph crag") >= workers and _answers_ok(server)

    cmd = [*fastcrag_command(), "serve", "--port", str(port), "--workers", str(workers), *args]
    return launch(cmd, port, log_dir / f"serve-{port}.log", env=env, ready=all_workers, timeout_s=timeout_s)


@contextlib.contextmanager
def langgraph_dev(
    project: Path, log_dir: Path, env: Mapping[str, str], timeout_s: float = 240.0
) -> Iterator[ServerProcess]:
    """`langgraph dev` in `project` (the folder with `langgraph.json`) on a free port; removes its state folder after.

    Raises:
        ServerStartError: no `langgraph` CLI, no `langgraph.json`, or the server did not start.
    """
    langgraph = langgraph_command()
    if langgraph is None:
        raise ServerStartError("no `langgraph` CLI in this environment (pip install 'langgraph-cli[inmem]')")
    if not (project / "langgraph.json").is_file():
        raise ServerStartError(f"no langgraph.json in {project}")
    port = free_port()
    state = project / ".langgraph_api"
    had_state = state.exists()
    cmd = [*langgraph, "dev", "--host", "127.0.0.1", "--port", str(port), "--no-browser", "--no-reload"]
    try:
        with launch(cmd, port, log_dir / f"langgraph-dev-{port}.log", env=env, cwd=project, timeout_s=timeout_s) as s:
            yield s
    finally:
        if not had_state:
            shutil.rmtree(state, ignore_errors=True)

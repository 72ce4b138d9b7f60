"""`python -m lab bench-speed` pieces (targets, the served-vs-local comparison) and the server launcher, no models."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fastcrag.evaluation import launch
from lab.benchmarks import bench_speed
from lab.cli import main


def test_unknown_section_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-speed", "--skip", "core,warp"]) == 2
    assert "unknown section(s) warp" in capsys.readouterr().err
    assert main(["bench-speed", "--questions", "0"]) == 2
    assert "--questions must be between 1 and 20" in capsys.readouterr().err


def test_target_lines_mark_met_and_missed() -> None:
    report: dict[str, Any] = {
        "core": {
            "CRAG off": {"retrieval_total_ms": {"p50": 410.0, "p95": 500.0}},
            "CRAG on": {"crag_ms": {"p50": 12.5, "p95": 60.0}},
        },
        "serve": {
            "fastcrag serve --workers 2": {"overhead P50 ms": -8.0},
            "langgraph dev": {"overhead P50 ms": 870.0},
            "broken": {"error": "no langgraph CLI"},
        },
        "cold": {"ask to answer s": 6.5, "serve start to first answer s": 9.25},
    }
    lines = bench_speed.target_lines(report)
    assert lines[0] == "retrieval total P50 ms (CRAG off): 410.0 vs <= 200: MISSED"
    assert lines[1] == "crag_ms P50 (CRAG on): 12.5 vs <= 20: met"
    assert lines[2] == "fastcrag serve --workers 2 /runs/wait overhead P50 ms: -8.0 vs <= 100: met"
    assert lines[3].startswith("langgraph dev /runs/wait overhead P50 ms: +870 (reported")
    assert not any("broken" in line for line in lines)
    assert lines[4] == "cold start: ask 6.50 s, serve to first answer 9.25 s (reported)"


class _Local:
    """Stands in for the in-process graph: 20 ms inside the stages, nothing outside."""

    def invoke(self, question: str, context: Any = None) -> dict[str, Any]:
        time.sleep(0.02)
        return {"crag": {"timings": {"retrieve_ms": 5.0, "rerank_ms": 15.0}}}


def test_served_against_local_splits_overhead_inside_and_outside_the_graph() -> None:
    asked: list[str] = []

    def wait(question: str) -> dict[str, Any]:  # 20 ms in the graph plus 30 ms of transport
        asked.append(question)
        time.sleep(0.05)
        return {"crag": {"timings": {"retrieve_ms": 5.0, "rerank_ms": 15.0}}}

    figures = bench_speed.served_against_local(wait, _Local(), ["a", "b", "c"])  # type: ignore[arg-type]
    assert asked == ["a", "b", "c"]
    assert 20 <= figures["overhead P50 ms"] <= 200
    assert figures["served outside the graph P50 ms"] >= 30 - 1
    assert 0 <= figures["in-process outside the graph P50 ms"] < figures["served outside the graph P50 ms"]


SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/ok" else 404); self.end_headers()
    def log_message(self, *args): pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_launch_waits_until_ready_and_stops_the_server(tmp_path: Path) -> None:
    port = launch.free_port()
    with launch.launch([sys.executable, "-c", SERVER, str(port)], port, tmp_path / "s.log", env={}) as server:
        assert server.url == f"http://127.0.0.1:{port}" and server.start_s > 0
        assert server.proc.poll() is None
        assert "listening" in server.log_text()
    assert server.proc.poll() is not None  # stopped on leaving


def test_launch_reports_a_server_that_exits(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('bad setting: FASTRAG_X'); sys.exit(3)"]
    with pytest.raises(launch.ServerStartError, match=r"exited with 3:\nbad setting: FASTRAG_X"):
        with launch.launch(cmd, launch.free_port(), tmp_path / "s.log", env={}, timeout_s=30):
            pass


def test_langgraph_dev_needs_a_project(tmp_path: Path) -> None:
    if launch.langgraph_command() is None:
        pytest.skip("no langgraph CLI installed")
    with pytest.raises(launch.ServerStartError, match=r"no langgraph\.json"):
        with launch.langgraph_dev(tmp_path, tmp_path, env={}):
            pass

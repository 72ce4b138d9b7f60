"""Run the fault and timing tests beside a busy core, three times in a row: `python scripts/load_check.py`.

A user's machine is rarely idle. The tests marked `load` (pyproject's pytest markers: the server's fault tests and
the other tests with time bounds) take their bounds from what they measure in the same run, so they must pass with
another process busy on a core. This check starts that process (a busy loop with its own deadline, so it never
outlives the check), runs `python -m pytest -m load` `--runs` times in a row beside it, stops it, and prints each
run's result. Exit status 0 when every run passed, 1 when one failed, 2 for bad arguments.

Usage (from the repository root, in the environment the tests run in):

    python scripts/load_check.py [--runs 3] [--busy 1] [--budget-min 30] [-- EXTRA PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def busy_cores(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Start `count` processes that each keep a core busy for at most `seconds`."""
    code = BUSY_LOOP.format(seconds=float(seconds))
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Stop the busy loops this check started."""
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def summary(output: str) -> str:
    """Pytest's closing line ("3 passed in 61.2s"), or the last line it printed."""
    lines = [line.strip("= ") for line in output.splitlines() if line.strip()]
    found = [line for line in lines if " in " in line and ("passed" in line or "failed" in line or "error" in line)]
    return found[-1] if found else (lines[-1] if lines else "no output")


def main(argv: list[str] | None = None) -> int:
    """Run the check; the exit status says whether every run passed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the `load` tests in a row (default 3)")
    parser.add_argument("--busy", type=int, default=1, help="cores kept busy beside them (default 1)")
    parser.add_argument(
        "--budget-min", type=float, default=30.0, help="the busy loops stop by themselves after this many minutes"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.busy < 0 or args.budget_min <= 0:
        print("error: --runs must be at least 1, --busy at least 0, --budget-min above 0", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "pytest", "-m", "load", "-p", "no:cacheprovider", "-q", *args.pytest_args]
    print(f"load check: {' '.join(command[1:])}, {args.runs} runs beside {args.busy} busy core(s)", flush=True)
    results: list[tuple[int, float, str]] = []
    busy = busy_cores(args.busy, args.budget_min * 60)
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            took = time.monotonic() - started
            print(done.stdout, end="", flush=True)
            print(done.stderr, end="", file=sys.stderr, flush=True)
            results.append((done.returncode, took, summary(done.stdout)))
            print(f"load check run {run}/{args.runs}: exit {done.returncode} in {took:.0f} s", flush=True)
    finally:
        stop(busy)
    print("\nload check:")
    for run, (code, took, line) in enumerate(results, 1):
        print(f"  run {run}: {'passed' if code == 0 else 'FAILED'} ({line}; {took:.0f} s)")
    return 0 if all(code == 0 for code, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

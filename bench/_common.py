"""Helpers shared by the benchmark scripts: machine description and docs/benchmarks.md update."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "docs" / "benchmarks.md"
START_LOAD = os.getloadavg()[0]  # when the script imported this module, before its own work


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return (f"{cpu}, {os.cpu_count()} cores{mem}; Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def header(command: str) -> str:
    today = dt.date.today().isoformat()
    return (f"- Machine: {machine()}\n- Date: {today}\n- Command: `{command}`\n"
            f"- Load average at the start: {START_LOAD:.1f} over the last minute (above about "
            "1, other work shared the cores and times are pessimistic)\n")


def update_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def docs_parser(description: str | None) -> argparse.ArgumentParser:
    """An argument parser with ``--write-docs`` (results into the docs; default: printed)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--write-docs", action="store_true",
                    help="write the results into the docs (default: print them only)")
    return ap


def timed_runs(run, repeat: int):
    """``run()`` ``repeat`` times: the wall time of each (s) and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    return times, result


def publish(write: bool, name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Print a section's text and, with ``--write-docs``, put it into ``path``."""
    print(body, flush=True)
    if write:
        update_section(name, body, path)
        print(f"wrote section {name!r} of {os.path.relpath(path, ROOT)}", flush=True)


def timed_process(argv: list[str], log: Path) -> tuple[float, int, float]:
    """Run ``argv`` with its output in ``log``; its wall time (s), exit code and own peak
    resident memory (MB)."""
    with log.open("w") as sink:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    return wall, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


def require_data(instance: Path) -> None:
    """Stop with the name of the missing file when ``instance`` (or the trace it reads, e.g. in
    ../shared/data) is not there."""
    from llmopt.data.instance import load_instance
    from llmopt.errors import LlmoptError

    try:
        load_instance(instance)
    except LlmoptError as exc:
        raise SystemExit(f"this benchmark needs its data: {exc}") from None


def python_loop_s() -> float:
    """Seconds for 10⁷ iterations of a Python loop: how fast this machine was at the time (a
    shared VM's speed varies by 2–3× over a day)."""
    t0 = time.perf_counter()
    total = 0
    for k in range(10 ** 7):
        total += k
    return time.perf_counter() - t0


def command_line() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])

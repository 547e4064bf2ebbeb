"""How long a command takes from the shell, startup included (issue 31: nothing heavy at import
time). Each command runs ``--repeat`` times in a fresh process; the table gives the best and the
median wall time and the target.

Targets on the 2-core development machine: ``llmopt --help`` and ``llmopt list`` under 0.5 s,
``llmopt solve instances/toy/quickstart.yaml`` (a bin packing solved in milliseconds, its
solution validated and drawn) under 1.5 s.

Usage::

    python bench/cli_startup.py [--repeat 5] [--write-docs]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, command_line, docs_parser, header, publish

TARGETS_S = {"--help": 0.5, "list": 0.5, "solve": 1.5}


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> None:
    ap = docs_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    llmopt = shutil.which("llmopt") or f"{sys.executable} -m llmopt"
    out = Path(tempfile.mkdtemp(prefix="llmopt-startup-"))
    commands = {  # name -> (shown, argv)
        "--help": ("llmopt --help", [*llmopt.split(), "--help"]),
        "list": ("llmopt list", [*llmopt.split(), "list"]),
        "solve": ("llmopt solve instances/toy/quickstart.yaml",
                  [*llmopt.split(), "solve", "instances/toy/quickstart.yaml", "--out", str(out)]),
        "python": ("python -c pass (the interpreter alone)", [sys.executable, "-c", "pass"]),
    }
    rows = []
    for name, (shown, argv) in commands.items():
        times = [timed(argv) for _ in range(args.repeat)]
        target = TARGETS_S.get(name)
        rows.append(f"| `{shown}` | {min(times):.2f} s | {statistics.median(times):.2f} s | "
                    f"{'—' if target is None else f'< {target} s'} |")
        print(rows[-1], flush=True)
    shutil.rmtree(out, ignore_errors=True)
    body = ("## Command-line startup (issue 31)\n\n" + header(command_line())
            + f"\n{args.repeat} runs of each command, each in a fresh process.\n\n"
            "| command | best | median | target |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    publish(args.write_docs, "cli-startup", body)


if __name__ == "__main__":
    main()

"""Run a command and write the CPU seconds (user + system) it and every process below it
used, workers that outlived their parents included, to a file.

    python .ci/cpu_seconds.py OUTPUT COMMAND [ARG ...]

The exit status is the command's. Used by `.ci/gpu --rehearse-on-cpu --gpu-sizes`: on a
machine shared with other jobs a step's wall time grows with their load, its CPU time
much less, so the CPU time says better what the step costs on a machine of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import sys
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    output, command = Path(argv[0]), argv[1:]
    # Orphans (a forkserver whose parent ended, say) come to this process, which reaps
    # them: their CPU time, and that of the processes they reaped, is counted too.
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    status = subprocess.call(command)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    output.write_text(f"{usage.ru_utime + usage.ru_stime:.1f}\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Console-script shims: exec the symmem programs shipped in symmem/bin."""

import os
import sys
from pathlib import Path


def _exec(name: str) -> None:
    exe = Path(__file__).resolve().parent / "bin" / name
    if not os.access(exe, os.X_OK):
        sys.exit(f"{name}: this symmem installation has no {exe} (the program was not built)")
    os.execv(str(exe), [str(exe), *sys.argv[1:]])


def run() -> None:
    _exec("symmem-run")


def bench() -> None:
    _exec("symmem-bench")


def store() -> None:
    _exec("symmem-store")


def tune() -> None:
    _exec("symmem-tune")

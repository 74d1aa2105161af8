"""Runs pytest on N local ranks under torchrun (torch.distributed.run --standalone):
    python torchrun_pytest.py N pytest-args...
Exits 77 (ctest: skipped) with the reason where torch is not installed, so that the test is
reported as skipped, never as passed."""

import importlib.util
import os
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    if importlib.util.find_spec("torch") is None:
        print("skipped: torch is not installed (pip install torch), so there is no torchrun")
        return 77
    n = sys.argv[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "-m", "pytest", *sys.argv[2:]]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())

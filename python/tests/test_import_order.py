"""symmem and torch in one process, imported in either order (NOTE [which NCCL] in
src/nccl/nccl_library.hpp): the nccl plugin must not bring its own libnccl.so.2 ahead of the
framework's. Each order runs in a fresh interpreter. Skipped without torch."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch is not installed")

# symmem's plugins are loaded by available_backends(); torch.distributed pulls in libtorch_cuda
# (and its NCCL) where torch has CUDA.
_SYMMEM_FIRST = "import symmem; b = symmem.available_backends(); import torch, torch.distributed; print(b)"
_TORCH_FIRST = "import torch, torch.distributed; import symmem; print(symmem.available_backends())"


def _run(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                       env=dict(os.environ))
    assert r.returncode == 0, f"python -c {code!r} failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.parametrize("code", [_SYMMEM_FIRST, _TORCH_FIRST], ids=["symmem_first", "torch_first"])
def test_import_order(code):
    assert "host" in _run(code)


def test_nccl_wheel_chosen_from_python():
    # With the nvidia-nccl wheel installed (the NCCL torch loads), importing symmem points the
    # plugin at it unless the user chose one.
    import importlib.util

    spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    if spec is None:
        pytest.skip("the nvidia-nccl wheel is not installed")
    env = {k: v for k, v in os.environ.items() if k != "SYMMEM_NCCL_LIBRARY"}
    code = "import os, symmem; print(os.environ.get('SYMMEM_NCCL_LIBRARY', ''))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    chosen = r.stdout.strip()
    assert chosen.endswith("libnccl.so.2") and os.path.isfile(chosen), chosen
    env["SYMMEM_NCCL_LIBRARY"] = "/mine/libnccl.so.2"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.stdout.strip() == "/mine/libnccl.so.2", "a user's SYMMEM_NCCL_LIBRARY was replaced"

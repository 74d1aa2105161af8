"""Where the backend-independent Python tests (test_mp.py) keep their arrays: NOTE [backend
suites] in tests/common/suite_target.hpp, for Python.

SYMMEM_TEST_DEVICE=cpu (the default: numpy arrays, the host backend; what CI runs) or cuda
(torch tensors on the rank's GPU, on the backend that SYMMEM_BACKEND names; what
scripts/gpu-check.sh runs). The tests write inputs and read results only through a Suite, so one
test serves both, and they skip what the backend's op table does not serve (symmem.serves),
never by a hand-written list."""

import os

import numpy as np
import pytest

import symmem
from gpu_group import use_rank_gpu

DEVICE = os.environ.get("SYMMEM_TEST_DEVICE", "cpu")


def skip_module_without_device():
    """At import of a suite module: skips it whole where its device is missing (so that a run
    on a machine without a GPU reports skipped, never passed)."""
    if DEVICE == "cuda":
        torch = pytest.importorskip("torch", reason="the cuda suite moves data with torch")
        if not torch.cuda.is_available():
            pytest.skip("SYMMEM_TEST_DEVICE=cuda: no CUDA GPU", allow_module_level=True)


class Suite:
    def __init__(self, g):
        self.g = g
        self.torch = None
        if DEVICE == "cpu":
            self.device = "cpu"
        elif DEVICE == "cuda":
            torch = pytest.importorskip("torch", reason="the cuda suite moves data with torch")
            if not torch.cuda.is_available():
                pytest.skip("no CUDA GPU")
            index = use_rank_gpu(torch, g)
            self.torch = torch
            self.device = f"cuda:{index}"
        else:
            raise ValueError(f"SYMMEM_TEST_DEVICE={DEVICE!r}: takes cpu or cuda")
        self.backend, _ = symmem.resolve_backend(g, self.device)

    @property
    def gpu(self):
        return self.torch is not None

    # ---- what the backend serves ---------------------------------------------------------------
    def require(self, op, dtype):
        """Skips the test unless the backend's op table serves `op` on `dtype` here."""
        if not symmem.serves(self.backend, op, dtype, self.device):
            pytest.skip(f"the {self.backend} backend's op table does not serve {op} {dtype} on "
                        f"{self.device}")

    # ---- arrays ---------------------------------------------------------------------------------
    def empty(self, shape, dtype="float32", group=None):
        """A symmetric array on this suite's device (collective over the group)."""
        return symmem.empty(shape, dtype=dtype, device=self.device, group=group or self.g)

    def plain(self, values):
        """Ordinary (non-symmetric) memory of this device holding `values` (a numpy array)."""
        values = np.ascontiguousarray(values)
        if not self.gpu:
            return values.copy()
        return self.torch.from_numpy(values.copy()).to(self.device)

    def zeros(self, shape, dtype):
        return self.plain(np.zeros(shape, dtype=dtype))

    def host(self, x):
        """A numpy copy of `x` (a symmetric array, one of its peer or pad views, or plain memory),
        after the device has finished what was enqueued."""
        if not self.gpu:
            return np.array(np.from_dlpack(x) if not isinstance(x, np.ndarray) else x)
        self.torch.cuda.synchronize()
        t = x if isinstance(x, self.torch.Tensor) else self.torch.from_dlpack(x)
        return t.cpu().numpy()

    def set(self, x, values):
        """Writes `values` (broadcast to x's shape) into `x`."""
        if not self.gpu:
            target = x if isinstance(x, np.ndarray) else np.from_dlpack(x)
            target[...] = values
            return
        t = x if isinstance(x, self.torch.Tensor) else self.torch.from_dlpack(x)
        src = np.broadcast_to(np.asarray(values, dtype=self.host(x).dtype), tuple(t.shape))
        self.torch.cuda.synchronize()
        t.copy_(self.torch.from_numpy(np.ascontiguousarray(src)))
        self.torch.cuda.synchronize()

    def settle(self):
        """Raises what the device found during the ops before (GPU: after a synchronize, through
        the group's error query; docs/design.md, "Stream-ordered errors"); nothing on the host
        backend, whose ops raise at the call."""
        if self.gpu:
            self.torch.cuda.synchronize()
            self.g.check_async_error()

"""Single-process tests of the symmem Python API: a world of one rank over a HashStore."""

import ctypes
import gc
import threading
import time

import numpy as np
import pytest

import symmem


@pytest.fixture(scope="module")
def g():
    return symmem.Group.create(symmem.HashStore(), 0, 1)


def capsule_name(cap):
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    return ctypes.pythonapi.PyCapsule_GetName(cap).decode()


class Ticker:
    """A thread that counts 1 ms sleeps: it only advances while the GIL is free."""

    def __init__(self):
        self.ticks = 0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop:
            time.sleep(0.001)
            self.ticks += 1

    def __enter__(self):
        self._t.start()
        time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._t.join()


def test_group(g):
    assert g.valid and g.rank == 0 and g.world_size == 1
    assert g.local_rank == 0 and g.local_world_size == 1
    assert g.global_ranks == [0] and g.global_rank(0) == 0 and g.group_rank(0) == 0
    assert g.single_host and g.same_host(0)
    assert "rank=0" in repr(g)
    with pytest.raises(symmem.InvalidArgument):
        g.global_rank(1)


def test_empty_is_zero_copy(g):
    b = symmem.empty((4, 8), dtype="float32", group=g)
    assert b.shape == (4, 8) and b.dtype == "float32" and b.size == 32 and b.nbytes == 128
    assert b.device == "cpu" and b.rank == 0 and b.world_size == 1 and b.backend == "host"
    assert b.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(b)
    assert a.shape == (4, 8) and a.dtype == np.float32 and a.flags["C_CONTIGUOUS"]
    assert a.ctypes.data == b.data_ptr() == b.ptr(0) == b.handle.ptr(0)
    a[:] = 7
    assert (np.from_dlpack(b) == 7).all()  # a second import sees the same memory
    assert np.asarray(b).ctypes.data == b.data_ptr()
    assert b.numpy().ctypes.data == b.data_ptr()


@pytest.mark.parametrize(
    "name", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
             "uint16", "uint32", "uint64", "bool"])
def test_dtypes(g, name):
    b = symmem.empty((3,), dtype=name, group=g)
    assert b.dtype == name and b.itemsize == np.dtype(name).itemsize
    assert np.from_dlpack(b).dtype == np.dtype(name)


def test_dtype_spellings(g):
    assert symmem.empty(2, dtype=np.float64, group=g).dtype == "float64"
    assert symmem.empty(2, dtype=np.dtype("int32"), group=g).dtype == "int32"
    assert symmem.empty(2, dtype="bf16", group=g).dtype == "bfloat16"
    assert symmem.empty(2, dtype="f16", group=g).itemsize == 2
    assert symmem.empty(2, dtype=float, group=g).dtype == "float64"  # as numpy reads it
    assert symmem.empty(2, dtype=int, group=g).dtype == "int64"
    assert symmem.empty(2, dtype=bool, group=g).dtype == "bool"


def test_default_group_and_zero_size(g):
    symmem.set_default_group(g)
    try:
        b = symmem.empty((0,), dtype="float32")
        assert b.size == 0 and np.from_dlpack(b).shape == (0,)
        z = symmem.zeros((5,), dtype="int64")
        assert (np.from_dlpack(z) == 0).all()
    finally:
        symmem.set_default_group(None)
    assert symmem.default_group() is None


def test_capsules_legacy_and_versioned(g):
    b = symmem.empty((16,), dtype="int32", group=g)
    assert capsule_name(b.__dlpack__()) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(b.__dlpack__(max_version=(1, 3), stream=None)) == "dltensor_versioned"
    with pytest.raises(BufferError):
        b.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        b.__dlpack__(dl_device=(2, 0))
    for _ in range(100):  # unconsumed capsules free their context
        b.__dlpack__(max_version=(1, 0))
        b.__dlpack__()


def test_consumer_keeps_memory_alive(g):
    b = symmem.empty((1024,), dtype="int32", group=g)
    a = np.from_dlpack(b)
    a[:] = 5
    ptr = b.data_ptr()
    del b
    gc.collect()
    others = [symmem.empty((1024,), dtype="int32", group=g) for _ in range(4)]
    for o in others:
        np.from_dlpack(o)[:] = -1
    assert a.ctypes.data == ptr and (a == 5).all()


def memfd_mappings(name):
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if name in line)


def test_view_after_free(g):
    """free() invalidates the handle at once; a numpy (and torch) view stays readable until it
    goes, and then the mapping goes too (NOTE [free with live views])."""
    b = symmem.empty((1024,), dtype="float32", group=g)
    mem = b.handle
    name = f"symmem:{g.name}#{mem.alloc_id}:r0"
    a = np.from_dlpack(b)
    a[:] = 3.0
    t = None
    try:
        import torch  # noqa: PLC0415
        t = torch.from_dlpack(b)
    except ImportError:
        pass
    assert mem.valid and not mem.freed
    mem.free()
    assert not mem.valid and mem.freed
    with pytest.raises(symmem.InvalidArgument, match="freed"):
        symmem.all_reduce(b)
    with pytest.raises(symmem.InvalidArgument, match="freed"):
        mem.free()
    with pytest.raises(symmem.InvalidArgument, match="freed"):
        b.numpy()  # a new consumer is refused
    assert (a == 3.0).all()  # still mapped: reading it does not crash
    if t is not None:
        assert bool((t == 3.0).all())
    assert memfd_mappings(name) >= 1
    del a, t
    gc.collect()
    assert memfd_mappings(name) == 0, "the mapping outlived its last consumer"


def test_views_of_one_allocation(g):
    mem = symmem.allocate(g, 4096)
    assert mem.size == 4096 and mem.rank == 0 and mem.world_size == 1
    x = mem.array((256,), "float32")
    y = mem.array((256,), "float64", offset=1024)
    assert y.data_ptr() == x.data_ptr() + 1024
    np.from_dlpack(y)[:] = 2.5
    symmem.all_reduce(y)
    assert (np.from_dlpack(y) == 2.5).all()
    with pytest.raises(symmem.InvalidArgument):
        mem.array((1024,), "float64", offset=1024)


def test_peer_and_signal_pad(g):
    b = symmem.empty((8,), dtype="float32", group=g)
    p = b.peer(0)
    assert p.buffer_rank == 0 and p.data_ptr() == b.data_ptr()
    pad = b.signal_pad()
    assert pad.is_signal_pad and pad.dtype == "uint32"
    assert pad.size == b.handle.signal_pad_bytes // 4
    assert pad.data_ptr() == b.handle.signal_pad_ptr(0)
    assert (np.from_dlpack(pad) == 0).all()  # zero at rest
    with pytest.raises(symmem.InvalidArgument):
        b.peer(1)
    with pytest.raises(symmem.InvalidArgument):
        b.signal_pad(3)
    b.put_signal(0, channel=1)
    assert np.from_dlpack(pad)[1 * 1 + 0] == 1  # slot channel * world + src
    b.wait_signal(0, channel=1, timeout=5)
    assert (np.from_dlpack(pad) == 0).all()
    b.barrier(timeout=5)


def test_all_reduce_world1(g):
    b = symmem.empty((100,), dtype="float32", group=g)
    np.from_dlpack(b)[:] = np.arange(100)
    for op in ("sum", "avg", "min", "max"):
        symmem.all_reduce(b, op=op)
        assert (np.from_dlpack(b) == np.arange(100)).all()
    for algo in ("one_shot", "two_shot"):
        symmem.all_reduce(b, algo=algo)
    x = np.arange(10, dtype=np.int64)  # ordinary memory: copied through the workspace
    symmem.all_reduce(x, group=g)
    assert (x == np.arange(10)).all()
    out = np.zeros(10, dtype=np.int64)
    symmem.all_reduce(x, out=out, group=g)
    assert (out == x).all()
    t = np.from_dlpack(b)[10:20]  # a foreign array inside symmetric memory: group found
    symmem.all_reduce(t)


def test_other_ops_world1(g):
    s = np.arange(6, dtype=np.float64)
    r = np.zeros(6)
    symmem.reduce_scatter(s, r, group=g)
    assert (r == s).all()
    r[:] = 0
    symmem.all_gather(s, r, group=g)
    assert (r == s).all()
    r[:] = 0
    symmem.all_to_all(s, r, group=g)
    assert (r == s).all()
    x = np.arange(4, dtype=np.int32)
    symmem.broadcast(x, root=0, group=g)
    assert (x == np.arange(4)).all()
    y = np.zeros(4, dtype=np.int32)
    symmem.broadcast(x, 0, out=y, group=g)
    assert (y == x).all()
    sc = np.array([4], dtype=np.int64)
    rc = np.zeros(1, dtype=np.int64)
    ro = np.zeros(1, dtype=np.int64)
    recv = np.zeros(8, dtype=np.float64)
    symmem.all_to_all_v(s, sc, recv, rc, ro, group=g)
    assert rc[0] == 4 and ro[0] == 0 and (recv[:4] == s[:4]).all()
    symmem.barrier(group=g, timeout=10)

    b = symmem.empty((8,), dtype="int32", group=g)
    np.from_dlpack(b)[:] = 0
    symmem.put(b, np.arange(4, dtype=np.int32), 0, offset=2)
    assert list(np.from_dlpack(b)) == [0, 0, 0, 1, 2, 3, 0, 0]
    dst = np.zeros(3, dtype=np.int32)
    symmem.get(b, dst, 0, offset=3)
    assert list(dst) == [1, 2, 3]
    symmem.put(b, np.ones(1, dtype=np.int32), 0, signal=True, channel=2)
    b.wait_signal(0, channel=2, timeout=5)


def test_errors_map_to_classes(g):
    b = symmem.empty((8,), dtype="float32", group=g)
    with pytest.raises(symmem.InvalidArgument, match="dtype") as e:
        symmem.empty((2,), dtype="complex32", group=g)
    assert isinstance(e.value, ValueError) and isinstance(e.value, symmem.Error)
    assert e.value.code == symmem.ErrorCode.InvalidArgument
    with pytest.raises(symmem.InvalidArgument, match="'op'"):
        symmem.all_reduce(b, op="prod")
    with pytest.raises(symmem.InvalidArgument, match="'algo'"):
        symmem.all_reduce(b, algo="fast")
    # Byte dtypes are moved, not reduced: the error names the ops that take them.
    with pytest.raises(symmem.Unsupported, match="uint8 is taken by all_gather, all_to_all"):
        symmem.all_reduce(np.zeros(4, dtype=np.uint8), group=g)
    with pytest.raises(symmem.InvalidArgument, match="contiguous"):
        symmem.all_reduce(np.zeros((4, 4), dtype=np.float32)[:, 1], group=g)
    with pytest.raises(symmem.InvalidArgument, match="not an array"):
        symmem.all_reduce([1.0, 2.0], group=g)
    ro = np.zeros(4, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises((symmem.InvalidArgument, BufferError)):
        symmem.all_reduce(ro, group=g)
    with pytest.raises(symmem.InvalidArgument, match="'send'"):
        symmem.reduce_scatter(np.zeros(3), np.zeros(2), group=g)
    with pytest.raises(symmem.InvalidArgument, match="'recv'"):
        symmem.all_gather(np.zeros(3), np.zeros(2), group=g)
    with pytest.raises(symmem.InvalidArgument, match="'out'"):
        symmem.all_reduce(np.zeros(3), out=np.zeros(3, dtype=np.float32), group=g)
    with pytest.raises(symmem.InvalidArgument, match="symmetric memory"):
        symmem.put(np.zeros(4, dtype=np.float32), np.zeros(4, dtype=np.float32), 0)
    with pytest.raises(symmem.InvalidArgument, match="do not fit"):
        symmem.put(b, np.zeros(4, dtype=np.float32), 0, offset=6)
    with pytest.raises(symmem.InvalidArgument, match="device"):
        symmem.empty((2,), device="tpu", group=g)
    with pytest.raises(symmem.InvalidArgument, match="timeout"):
        b.barrier(timeout=-1)
    with pytest.raises(symmem.InvalidArgument, match="stream"):
        symmem.all_reduce(b, stream="s")
    with pytest.raises(symmem.Timeout) as e:
        b.wait_signal(0, channel=0, timeout=0.2)
    assert isinstance(e.value, TimeoutError) and "rank 0" in str(e.value)


@pytest.mark.parametrize(
    "code,cls,also",
    [(1, "InvalidArgument", ValueError), (2, "Unsupported", NotImplementedError),
     (3, "Timeout", TimeoutError), (4, "PeerFailure", ConnectionError),
     (5, "BackendUnavailable", None), (6, "SystemFailure", OSError), (7, "CudaError", None),
     (8, "InternalError", None), (9, "Aborted", None)])
def test_every_code_has_a_class(code, cls, also):
    with pytest.raises(getattr(symmem, cls)) as e:
        symmem._C._raise(code, "op: rank 0: message")
    assert isinstance(e.value, symmem.Error) and isinstance(e.value, RuntimeError)
    assert e.value.code == symmem.ErrorCode(code)
    assert str(e.value) == "op: rank 0: message"
    if also is not None:
        assert isinstance(e.value, also)


def test_gil_released_during_wait(g):
    b = symmem.empty((8,), dtype="float32", group=g)
    with Ticker() as t:
        before = t.ticks
        with pytest.raises(symmem.Timeout):
            b.wait_signal(0, channel=3, timeout=0.5)
        during = t.ticks - before
    assert during >= 50, f"another thread ran only {during} ticks during a 0.5 s wait"


def test_gil_released_during_store_get():
    s = symmem.HashStore()
    with Ticker() as t:
        before = t.ticks
        with pytest.raises(symmem.Timeout):
            s.get("missing", timeout=0.5)
        during = t.ticks - before
    assert during >= 50, f"another thread ran only {during} ticks during a 0.5 s get"


def test_settings_and_version():
    names = [s["name"] for s in symmem.settings()]
    assert "SYMMEM_TIMEOUT_MS" in names and "SYMMEM_BACKEND" in names
    assert symmem.__version__.count(".") == 2
    assert "host" in symmem.available_backends()


def test_op_table_rows():
    rows = {r["name"]: r for r in symmem.op_table()}
    assert list(rows)[:2] == ["all_reduce", "reduce_scatter"]
    ag = rows["all_gather"]
    assert (ag["send"], ag["recv"], ag["in_place"], ag["kind"]) == ("one", "world", "send_block",
                                                                    "collective")
    assert rows["all_reduce"]["agree"] == ["count", "dtype", "op", "algo"]
    assert rows["reduce_scatter"]["busbw_factor"](4) == 0.75
    assert rows["barrier"]["kind"] == "sync" and rows["barrier"]["schema"] == ""
    assert set(rows) <= set(symmem.__all__)

"""Stores from Python: HashStore, FileStore, TcpStore(+Server) and a Python-implemented one."""

import threading

import pytest

import symmem


def exercise(s):
    s.set("a", b"1")
    s.set("t", "text")
    assert s.get("a", timeout=5) == b"1" and s.get("t") == b"text"
    assert s.add("n", 2) == 2 and s.add("n", 3) == 5
    assert s.compare_set("c", b"", b"x") == b"x"
    assert s.compare_set("c", b"y", b"z") == b"x"
    s.multi_set(["m1", "m2"], [b"p", b"q"])
    assert s.multi_get(["m1", "m2"], timeout=5) == [b"p", b"q"]
    assert s.check(["a", "m1"]) and not s.check(["nope"])
    s.wait(["a"], timeout=1)
    assert s.remove("a") and not s.check(["a"])
    assert s.num_keys() >= 5
    with pytest.raises(symmem.Timeout):
        s.get("never", timeout=0.1)


def test_hash_store():
    exercise(symmem.HashStore())


def test_file_store(tmp_path):
    try:
        s = symmem.FileStore(str(tmp_path / "store"))
    except symmem.Unsupported as e:
        pytest.skip(f"this libsymmem has no FileStore: {e}")
    exercise(s)


def test_tcp_store():
    server = symmem.TcpStoreServer.start("127.0.0.1", 0, "secret")
    try:
        assert server.port > 0
        exercise(symmem.TcpStore("127.0.0.1", server.port, "secret", timeout=10))
        s2 = symmem.Store.connect(f"tcp://127.0.0.1:{server.port}", "secret", timeout=10)
        assert s2.get("m1", timeout=5) == b"p"
    finally:
        server.stop()


class DictStore:
    """The PythonStore protocol over a dict (what symmem.torch does for a c10d store)."""

    def __init__(self):
        self.d = {}
        self.cv = threading.Condition()

    def set(self, key, value):
        with self.cv:
            self.d[key] = bytes(value)
            self.cv.notify_all()

    def get(self, key, timeout):
        self.wait([key], timeout)
        return self.d[key]

    def wait(self, keys, timeout):
        with self.cv:
            if not self.cv.wait_for(lambda: all(k in self.d for k in keys),
                                    None if timeout < 0 else timeout):
                raise TimeoutError(f"keys {keys} missing")

    def add(self, key, delta):
        with self.cv:
            v = int(self.d.get(key, b"0")) + delta
            self.d[key] = str(v).encode()
            self.cv.notify_all()
            return v

    def compare_set(self, key, expected, desired):
        with self.cv:
            cur = self.d.get(key)
            if (cur is None and expected == b"") or cur == expected:
                self.d[key] = desired
                self.cv.notify_all()
            return self.d.get(key, expected)

    def remove(self, key):
        with self.cv:
            return self.d.pop(key, None) is not None

    def check(self, keys):
        with self.cv:
            return all(k in self.d for k in keys)

    def num_keys(self):
        return len(self.d)


def test_python_store_and_group():
    s = symmem.PythonStore(DictStore())
    exercise(s)
    g = symmem.Group.create(s, 0, 1)
    b = symmem.empty((4,), dtype="float32", group=g)
    b.barrier()
    assert g.store is not None


def test_python_store_errors_map():
    class Broken(DictStore):
        def set(self, key, value):
            raise RuntimeError("disk on fire")

    s = symmem.PythonStore(Broken())
    with pytest.raises(symmem.SystemFailure, match="disk on fire"):
        s.set("k", b"v")
    with pytest.raises(symmem.Timeout):
        s.get("k", timeout=0.05)

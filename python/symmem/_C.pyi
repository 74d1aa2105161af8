"""symmem C++ bindings (use the `symmem` package)."""

from collections.abc import Sequence
import datetime
import enum
import types

import numpy



class ErrorCode(enum.Enum):
    """The code carried by every symmem.Error (its `code`)."""

    InvalidArgument = 1

    Unsupported = 2

    Timeout = 3

    PeerFailure = 4

    BackendUnavailable = 5

    System = 6

    Cuda = 7

    Internal = 8

class Error(RuntimeError):
    """Base class of every symmem error; `code` is its ErrorCode."""

    code: ErrorCode

class InvalidArgument(Error, ValueError): ...

class Unsupported(Error, NotImplementedError): ...

class Timeout(Error, TimeoutError): ...

class PeerFailure(Error, ConnectionError): ...

class BackendUnavailable(Error): ...

class SystemFailure(Error, OSError): ...

class CudaError(Error): ...

class InternalError(Error): ...

class Device:
    """A device: cpu or cuda:N."""

    @staticmethod
    def cpu() -> Device: ...

    @staticmethod
    def cuda(index: int) -> Device: ...

    @property
    def type(self) -> str: ...

    @property
    def index(self) -> int: ...

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

    def __eq__(self, arg: Device, /) -> bool: ...

def settings() -> list:
    """
    Every SYMMEM_* setting: a list of dicts (name, type, default, accepted, meaning).
    """

class Store:
    """
    Key-value rendezvous store. Values are bytes (str is encoded as UTF-8). Timeouts are seconds or datetime.timedelta (None: SYMMEM_TIMEOUT_MS).
    """

    def set(self, key: str, value: object) -> None: ...

    def get(self, key: str, timeout: object | None = None) -> bytes: ...

    def wait(self, keys: Sequence[str], timeout: object | None = None) -> None: ...

    def add(self, key: str, delta: int) -> int: ...

    def compare_set(self, key: str, expected: object, desired: object) -> bytes: ...

    def multi_get(self, keys: Sequence[str], timeout: object | None = None) -> list: ...

    def multi_set(self, keys: Sequence[str], values: object) -> None: ...

    def remove(self, key: str) -> bool: ...

    def check(self, keys: Sequence[str]) -> bool: ...

    def num_keys(self) -> int: ...

    @staticmethod
    def connect(url: str, token: str = '', timeout: object | None = None) -> Store:
        """Connects to tcp://host:port or opens file:///path."""

class HashStore(Store):
    """In-process store (tests, single-process groups)."""

    def __init__(self) -> None: ...

def FileStore(path: str) -> Store:
    """
    Store in a directory of a shared filesystem (Store.connect('file://' + path)).
    """

class TcpStore(Store):
    """Client of a TcpStoreServer."""

    def __init__(self, host: str, port: int, token: str = '', timeout: object | None = None) -> None: ...

class PythonStore(Store):
    """
    A Store implemented by a Python object `obj` with methods set(key: str, value: bytes), get(key, timeout_s) -> bytes, wait(keys, timeout_s), add(key, delta) -> int, compare_set(key, expected, desired) -> bytes, remove(key) -> bool, check(keys) -> bool, num_keys() -> int, and optionally multi_get(keys, timeout_s) / multi_set(keys, values). timeout_s is seconds (float; -1: the store's default). Its exceptions become symmem errors (Timeout for TimeoutError or a message about a timeout).
    """

    def __init__(self, obj: object) -> None: ...

    @property
    def obj(self) -> object: ...

class TcpStoreServer:
    """
    TCP store server (one event-loop thread). Stopped by stop() or when garbage-collected.
    """

    @staticmethod
    def start(host: str = '127.0.0.1', port: int = 0, token: str = '') -> TcpStoreServer: ...

    @property
    def port(self) -> int: ...

    @property
    def host(self) -> str: ...

    def stop(self) -> None: ...

    def serve_forever(self) -> None: ...

class Group:
    """
    A set of ranks that rendezvous through a Store (a cheap handle).

    Group.from_env() understands symmem-run, torchrun, mpirun (Open MPI) and srun; the first group it makes becomes the default group of the ops.
    """

    @staticmethod
    def from_env(*, rank: int | None = None, world_size: int | None = None, local_rank: int | None = None, local_world_size: int | None = None, store_url: str | None = None, store: Store | None = None, token: str | None = None, timeout: float | datetime.timedelta | None = None) -> Group:
        """
        The group of this job, from explicit arguments, SYMMEM_*, torchrun, Open MPI or Slurm variables (collective over the job).
        """

    @staticmethod
    def create(store: Store, rank: int, world_size: int, *, local_rank: int | None = None, local_world_size: int | None = None, timeout: float | datetime.timedelta | None = None) -> Group:
        """
        A group over an existing store with explicit rank and world size (collective).
        """

    @property
    def valid(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def local_world_size(self) -> int: ...

    @property
    def host_id(self) -> str: ...

    @property
    def single_host(self) -> bool: ...

    @property
    def global_ranks(self) -> list[int]: ...

    @property
    def store(self) -> Store: ...

    @property
    def name(self) -> str: ...

    @property
    def timeout(self) -> float:
        """Deadline of blocking calls, in seconds."""

    def same_host(self, peer: int) -> bool: ...

    def global_rank(self, group_rank: int) -> int: ...

    def group_rank(self, global_rank: int) -> int: ...

    def split(self, ranks: Sequence[int]) -> Group:
        """Subgroup of the listed ranks; collective over those ranks only."""

    def store_barrier(self) -> None:
        """Barrier over the store (slow; for setup and teardown)."""

    def __eq__(self, arg: Group, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

def default_group() -> Group | None:
    """
    The group ops use when none is given and the arrays are not symmetric (or None).
    """

def set_default_group(group: Group | None) -> None: ...

class DeviceHandle:
    """
    The plain struct GPU kernels receive (symmem/device_handle.hpp); bytes(handle) is its raw layout, to pass as a kernel argument.
    """

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def num_channels(self) -> int: ...

    @property
    def pad_slots(self) -> int: ...

    @property
    def buffers(self) -> int: ...

    @property
    def signal_pads(self) -> int: ...

    @property
    def timeout_record(self) -> int: ...

    @property
    def timeout_ns(self) -> int: ...

    def __bytes__(self) -> bytes: ...

class SymmetricMemory:
    """
    Handle of a symmetric allocation (or a view of one) over a group. Pointers are ints (device pointers on GPU backends).
    """

    @property
    def valid(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def size(self) -> int:
        """Bytes of this view on each rank."""

    @property
    def offset(self) -> int: ...

    @property
    def device(self) -> Device: ...

    @property
    def backend(self) -> str: ...

    @property
    def group(self) -> Group: ...

    @property
    def alloc_id(self) -> int: ...

    def ptr(self, peer: int) -> int:
        """This view's start in peer's buffer (0 where not directly addressable)."""

    @property
    def ptrs_device(self) -> int: ...

    def signal_pad_ptr(self, peer: int) -> int: ...

    def signal_pad(self, peer: int | None = None) -> SymmetricArray:
        """
        peer's signal pad (default: this rank's) as a uint32 array (DLPack-capable).
        """

    @property
    def signal_pad_bytes(self) -> int: ...

    @property
    def num_channels(self) -> int: ...

    def direct_access(self, peer: int) -> bool: ...

    def global_rank(self, rank: int) -> int: ...

    def device_handle(self) -> DeviceHandle: ...

    def view(self, offset: int, length: int) -> SymmetricMemory:
        """
        A view of [offset, offset+length) bytes of every rank's buffer (no rendezvous).
        """

    def free(self) -> None:
        """Frees the allocation now; every handle and view becomes invalid."""

    def array(self, shape: int | Sequence[int], dtype: object = 'float32', offset: int = 0) -> SymmetricArray:
        """A SymmetricArray over bytes [offset, offset + nbytes) of this view."""

    def __repr__(self) -> str: ...

    def barrier(self, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Barrier over the allocation's signal pads on `channel` (GPU: enqueued on `stream`).
        """

    def put_signal(self, dst: int, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Raises slot (channel, this rank) of dst's signal pad (after waiting for it to be 0).
        """

    def wait_signal(self, src: int, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Waits until src raised slot (channel, src) of this rank's pad, then resets it.
        """

class SymmetricArray:
    """
    An n-d array in symmetric memory (C order). Consumers see it without a copy through DLPack: numpy.from_dlpack(a), torch.from_dlpack(a), cupy.from_dlpack(a), jax.dlpack.from_dlpack(a). The memory lives while the array or any consumer does.
    """

    @property
    def shape(self) -> tuple: ...

    @property
    def dtype(self) -> str: ...

    @property
    def ndim(self) -> int: ...

    @property
    def size(self) -> int:
        """Number of elements."""

    @property
    def nbytes(self) -> int: ...

    @property
    def itemsize(self) -> int: ...

    @property
    def device(self) -> str: ...

    @property
    def handle(self) -> SymmetricMemory:
        """The SymmetricMemory (view) this array covers."""

    @property
    def group(self) -> Group: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def backend(self) -> str: ...

    @property
    def buffer_rank(self) -> int:
        """The rank whose buffer (or pad) this array shows."""

    @property
    def is_signal_pad(self) -> bool: ...

    def data_ptr(self) -> int: ...

    def ptr(self, peer: int | None = None) -> int:
        """
        Address of this array's data in peer's buffer (0 where not directly addressable).
        """

    def peer(self, peer: int) -> SymmetricArray:
        """
        The same array in peer's buffer (DLPack-capable; loads and stores reach the peer).
        """

    def signal_pad(self, peer: int | None = None) -> SymmetricArray:
        """peer's signal pad (default: this rank's) as a uint32 array."""

    def device_handle(self) -> DeviceHandle: ...

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> types.CapsuleType:
        """
        DLPack export (zero copy). `stream` is accepted and ignored: symmem memory has no pending producer work; order your own work on your stream.
        """

    def __dlpack_device__(self) -> tuple: ...

    def numpy(self) -> numpy.ndarray:
        """numpy.from_dlpack(self): a view, no copy."""

    def __array__(self, dtype: object = None, copy: bool | None = None) -> numpy.ndarray: ...

    def __len__(self) -> int: ...

    def __repr__(self) -> str: ...

    def barrier(self, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Barrier over the allocation's signal pads on `channel` (GPU: enqueued on `stream`).
        """

    def put_signal(self, dst: int, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Raises slot (channel, this rank) of dst's signal pad (after waiting for it to be 0).
        """

    def wait_signal(self, src: int, channel: int = 0, timeout: object | None = None, stream: object | None = None) -> None:
        """
        Waits until src raised slot (channel, src) of this rank's pad, then resets it.
        """

def allocate(group: Group | None, nbytes: int, device: str | int | object = 'cpu', backend: str | None = None, signal_pad_bytes: int = 0) -> SymmetricMemory:
    """
    Allocates nbytes of symmetric memory on every rank of group (collective).
    """

def empty(shape: int | Sequence[int], dtype: object = 'float32', device: str | int | object = 'cpu', group: Group | None = None, backend: str | None = None) -> SymmetricArray:
    """
    A new symmetric array (uninitialised; collective over group, default: the default group). device: 'cpu', 'cuda' (torch's current device when torch is imported, else the group's local rank), 'cuda:N', an int N or a torch.device.
    """

def select_backend(name: str) -> None:
    """
    Chooses this process's backend (auto, host, cuda, nvshmem, nccl) before the first allocation.
    """

def resolve_backend(group: Group, device: str | int | object = 'cpu') -> tuple[str, str]:
    """(backend, why): the backend that serves device for group."""

def available_backends() -> list[str]: ...

def all_reduce(x: object, op: str = 'sum', algo: str = 'auto', *, out: object = None, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    Reduces x over the group (op: sum, avg, min, max; algo: auto, one_shot, two_shot), in place, or into out when given. Every rank gets bitwise identical results.
    """

def reduce_scatter(send: object, recv: object, op: str = 'sum', *, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    send holds world_size blocks of recv.size elements; rank r receives the reduction of block r.
    """

def all_gather(send: object, recv: object, *, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    recv holds world_size blocks of send.size elements; block r is rank r's send.
    """

def all_to_all(send: object, recv: object, *, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    Block p of send (send.size / world_size elements) goes to peer p and lands at block r (this rank) of its recv.
    """

def all_to_all_v(send: object, send_counts: object, recv: object, recv_counts: object, recv_offsets: object, *, recv_counts_known: bool = False, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    send_counts[p] elements of send (packed in peer order) go to peer p. Counts/offsets are int64 arrays of world_size on the data's device. MoE style (default): recv_counts and recv_offsets are outputs; recv.size is the capacity. recv_counts_known=True: recv_counts is an input checked against the senders.
    """

def broadcast(x: object, root: int = 0, *, out: object = None, group: Group | None = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    root's x is copied into every rank's x (or out when given; x is read on root only).
    """

def put(dst: object, src: object, peer: int, *, offset: int = 0, signal: bool = False, channel: int = 0, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    Copies src into peer's copy of the symmetric array dst, at element `offset` of dst. signal=True raises slot (channel, this rank) of peer's pad once the data is visible (the peer consumes it with dst.wait_signal(this rank, channel)).
    """

def get(src: object, dst: object, peer: int, *, offset: int = 0, signal: bool = False, channel: int = 0, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    Copies dst.nbytes bytes from peer's copy of the symmetric array src (at element `offset`) into dst.
    """

def barrier(*, group: Group | None = None, device: object = None, stream: object = None, timeout: float | datetime.timedelta | None = None) -> None:
    """
    Barrier over the group's workspace signal pads (device: that of the group's latest allocation unless given).
    """

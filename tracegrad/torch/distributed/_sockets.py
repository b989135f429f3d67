"""A process group over TCP sockets: `torch.distributed`'s collectives between processes, on one
host or several, with nothing but the standard library (PyTorch's CPU backend, gloo, is what
scripts ask for; this plays its part).

Rendezvous: rank 0 listens at the master's address; every other rank connects to it, says its
rank and the port of a listener of its own, and gets the table of all of them; then rank i
connects to every rank between 0 and i and accepts the rest, so any two ranks share a socket.

Every operation runs on one worker thread in the order the ranks submit them (an asynchronous
one returns a `Work` at once); sends go through a second thread, so that a rank receives while
it sends and two ranks sending to each other never wait on each other. An all-reduce is a ring
(reduce-scatter, then all-gather): each rank sends and receives 2 (n - 1) / n of the buffer, and
every element is reduced once, by one rank, so all ranks end with the same bits. Every message
carries the number of the collective it belongs to and its length: ranks that call different
collectives (or different shapes) get an error naming both, not a hang or garbage. A rank that
exits closes its sockets, and the others' waits end with an error naming it.
"""

from __future__ import annotations

import pickle
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# (the collective's number, the payload's bytes); a point-to-point message's number is P2P
HEADER = struct.Struct("<qq")
P2P = -1
CONNECT_RETRY_S = 0.05

REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": np.add, "avg": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
}  # fmt: skip


class Work:
    """An operation submitted to the group: `wait()` returns once it is done on this rank (and
    raises its error, if it failed); `is_completed()` asks without waiting (a step's traced
    all-reduce, `wait_request`, tells it from MPI's requests by that)."""

    def __init__(self, what: str) -> None:
        self.what, self.error = what, None
        self._done = threading.Event()
        self.result: Any = None
        self.then: list[Callable[[], None]] = []  # run by the first `wait()` that succeeds

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait, then run what was to follow on this (the caller's) thread: copies into tensors
        that were not written in place."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.what}: not done within {timeout} s")
        if self.error is not None:
            raise self.error
        then, self.then = self.then, []
        for step in then:
            step()
        return True

    def get_future(self) -> Any:
        from concurrent.futures import Future

        future: Future = Future()
        self.wait()
        future.set_result(self.result)
        return future


def _connect(host: str, port: int, deadline: float, what: str) -> socket.socket:
    """Connect, retrying until `deadline`: the listener may not be up yet."""
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=max(deadline - time.time(), 1))
            break
        except OSError as e:
            if time.time() > deadline:
                raise TimeoutError(f"{what}: could not connect to {host}:{port} ({e})") from e
            time.sleep(CONNECT_RETRY_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def _send_all(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<q", len(data)) + data)


def _recv_exactly(sock: socket.socket, view: memoryview, who: str) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError(f"{who} closed its connection (it exited or failed)")
        got += n


def _recv_message(sock: socket.socket, who: str) -> bytes:
    size = bytearray(8)
    _recv_exactly(sock, memoryview(size), who)
    data = bytearray(struct.unpack("<q", size)[0])
    _recv_exactly(sock, memoryview(data), who)
    return bytes(data)


def rendezvous(rank: int, size: int, host: str, port: int, timeout: float) -> dict[int, Any]:
    """A socket to every other rank, by rank (see the module's docstring)."""
    deadline = time.time() + timeout
    what = f"init_process_group (rank {rank} of {size}, master {host}:{port})"
    if rank == 0:
        try:
            master = _listener("", port)
        except OSError as e:
            raise RuntimeError(f"{what}: rank 0 cannot listen at port {port} ({e}): another job "
                               "uses it; set MASTER_PORT (torchrun --master_port) to a free "
                               "one, or use --standalone") from e  # fmt: skip
        master.settimeout(timeout)
        peers, table = {}, {}
        try:
            while len(peers) < size - 1:
                sock, (address, _) = master.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                other, listen_port = pickle.loads(_recv_message(sock, "a joining rank"))
                peers[other], table[other] = sock, (address, listen_port)
        except TimeoutError as e:
            raise TimeoutError(f"{what}: {len(peers) + 1} of {size} ranks joined within "
                               f"{timeout} s") from e  # fmt: skip
        finally:
            master.close()
        for sock in peers.values():
            _send_all(sock, pickle.dumps(table))
        return peers
    own = _listener("", 0)
    own.settimeout(timeout)
    to_master = _connect(host, port, deadline, what)
    _send_all(to_master, pickle.dumps((rank, own.getsockname()[1])))
    table = pickle.loads(_recv_message(to_master, "rank 0"))
    peers = {0: to_master}
    for other in range(1, rank):
        sock = _connect(*table[other], deadline, what)
        sock.sendall(struct.pack("<q", rank))
        peers[other] = sock
    while len(peers) < size - 1:
        sock, _ = own.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        number = bytearray(8)
        _recv_exactly(sock, memoryview(number), "a joining rank")
        peers[struct.unpack("<q", number)[0]] = sock
    own.close()
    return peers


class SocketGroup:
    """The ranks of one job, joined by sockets (made by `rendezvous`); the collectives take NumPy
    arrays and work in place, as PyTorch's do on tensors."""

    def __init__(self, rank: int, size: int, peers: dict[int, Any], timeout: float) -> None:
        self.rank, self.size, self.timeout = rank, size, timeout
        self.peers = peers
        for sock in peers.values():
            sock.settimeout(timeout)
        self._calls = 0  # collectives submitted, the same count on every rank
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._sends: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(self._tasks,), daemon=True,
                         name="tracegrad-collectives").start()  # fmt: skip
        threading.Thread(target=self._serve, args=(self._sends,), daemon=True,
                         name="tracegrad-sends").start()  # fmt: skip

    def __tracegrad_watch__(self) -> None:
        """Nothing a compiled step does depends on the group's counters and queues."""

    # ----- the two threads

    @staticmethod
    def _serve(tasks: queue.SimpleQueue) -> None:
        while (task := tasks.get()) is not None:
            work, run = task
            try:
                work.result = run()
                work.finish()
            except BaseException as e:  # the caller's wait raises it
                work.finish(e)

    def submit(self, what: str, run: Callable[[int], Any]) -> Work:
        """Run `run(number)` on the worker thread after what was submitted before; `number`
        is this collective's, the same on every rank."""
        work = Work(what)
        number, self._calls = self._calls, self._calls + 1
        self._tasks.put((work, lambda: run(number)))
        return work

    def close(self) -> None:
        self._tasks.put(None)
        self._sends.put(None)
        for sock in self.peers.values():
            sock.close()

    # ----- messages

    def _who(self, peer: int) -> str:
        return f"rank {peer} of {self.size}"

    def post(self, peer: int, array: np.ndarray, number: int) -> Work:
        """Send `array` to `peer` from the send thread (it must not change until sent)."""
        work = Work(f"send to {self._who(peer)}")
        sock, payload = self.peers[peer], memoryview(_bytes_of(np.ascontiguousarray(array)))

        def send() -> None:
            sock.sendall(HEADER.pack(number, len(payload)))
            sock.sendall(payload)

        self._sends.put((work, send))
        return work

    def receive(self, peer: int, array: np.ndarray, number: int, what: str) -> None:
        """Fill the contiguous `array` from `peer`'s next message, which must be collective
        `number`'s and of `array`'s size."""
        sock, who = self.peers[peer], self._who(peer)
        header = bytearray(HEADER.size)
        try:
            _recv_exactly(sock, memoryview(header), who)
            theirs, nbytes = HEADER.unpack(header)
            if (theirs, nbytes) != (number, array.nbytes):
                raise RuntimeError(
                    f"{what} on rank {self.rank}: {who} sent {nbytes} bytes for its "
                    f"{_nth(theirs)}, this rank expects {array.nbytes} for its {_nth(number)}: "
                    "every rank must call the same collectives in the same order, with tensors "
                    "of the same shapes and dtypes"
                )
            _recv_exactly(sock, memoryview(_bytes_of(array)), who)
        except TimeoutError as e:
            raise TimeoutError(f"{what} on rank {self.rank}: no message from {who} within "
                               f"{self.timeout} s") from e  # fmt: skip

    def exchange(self, to: int, sent: np.ndarray, frm: int, into: np.ndarray, number: int,
                 what: str) -> None:  # fmt: skip
        sending = self.post(to, sent, number)
        self.receive(frm, into, number, what)
        sending.wait()

    # ----- collectives on flat contiguous arrays (run on the worker thread)

    def _ring(self, blocks: Sequence[np.ndarray], number: int, what: str, reduce: Any) -> None:
        """Ring reduce-scatter (with `reduce`: rank r ends with block r reduced over all ranks),
        then all-gather (every rank gets every rank's block r)."""
        n, r = self.size, self.rank
        right, left = (r + 1) % n, (r - 1) % n
        if reduce is not None:
            scratch = np.empty(max(b.size for b in blocks), blocks[0].dtype)
            for s in range(n - 1):
                out, inc = blocks[(r - s - 1) % n], blocks[(r - s - 2) % n]
                self.exchange(right, out, left, scratch[: inc.size], number, what)
                reduce(inc, scratch[: inc.size], out=inc)
        for s in range(n - 1):
            self.exchange(right, blocks[(r - s) % n], left, blocks[(r - s - 1) % n], number, what)

    def all_reduce(self, flat: np.ndarray, op: str, number: int) -> None:
        if self.size > 1:
            self._ring(np.array_split(flat, self.size), number, "all_reduce", REDUCTIONS[op])
        if op == "avg":
            np.divide(flat, self.size, out=flat, casting="unsafe")

    def all_gather(self, blocks: Sequence[np.ndarray], number: int) -> None:
        """`blocks[self.rank]` holds this rank's part; the others are filled."""
        self._ring(blocks, number, "all_gather", None)

    def reduce_scatter(self, blocks: Sequence[np.ndarray], op: str, number: int) -> np.ndarray:
        """Reduces every block over the ranks; gives this rank's (block `rank`)."""
        self._ring(blocks, number, "reduce_scatter", REDUCTIONS[op]) if self.size > 1 else None
        mine = blocks[self.rank]
        if op == "avg":
            np.divide(mine, self.size, out=mine, casting="unsafe")
        return mine

    def broadcast(self, flat: np.ndarray, src: int, number: int) -> None:
        if self.rank == src:
            for work in [self.post(p, flat, number) for p in sorted(self.peers)]:
                work.wait()
        else:
            self.receive(src, flat, number, "broadcast")

    def gather(self, flat: np.ndarray, into: Sequence[np.ndarray] | None, dst: int,
               number: int) -> None:  # fmt: skip
        if self.rank != dst:
            self.post(dst, flat, number).wait()
            return
        for peer, block in enumerate(into):
            if peer == dst:
                block[...] = flat
            else:
                self.receive(peer, block, number, "gather")

    def scatter(self, flat: np.ndarray, parts: Sequence[np.ndarray] | None, src: int,
                number: int) -> None:  # fmt: skip
        if self.rank != src:
            self.receive(src, flat, number, "scatter")
            return
        sends = [self.post(p, np.ascontiguousarray(parts[p]), number) for p in sorted(self.peers)]
        flat[...] = parts[src]
        for work in sends:
            work.wait()

    def all_to_all(self, sends: Sequence[np.ndarray], recvs: Sequence[np.ndarray],
                   number: int) -> None:  # fmt: skip
        """`recvs[q]` gets rank q's `sends[self.rank]`: in step s, this rank sends to rank + s
        and receives from rank - s."""
        n, r = self.size, self.rank
        recvs[r][...] = sends[r]
        for s in range(1, n):
            to, frm = (r + s) % n, (r - s) % n
            self.exchange(to, sends[to], frm, recvs[frm], number, "all_to_all")

    # ----- point to point (outside the collectives' numbering)

    def send(self, flat: np.ndarray, dst: int) -> Work:
        self._check_peer(dst, "send")
        return self.post(dst, flat, P2P)

    def recv(self, flat: np.ndarray, src: int) -> Work:
        self._check_peer(src, "recv")
        work = Work(f"recv from {self._who(src)}")
        self._tasks.put((work, lambda: self.receive(src, flat, P2P, "recv")))
        return work

    def _check_peer(self, peer: int, what: str) -> None:
        if peer == self.rank or peer not in self.peers:
            raise ValueError(f"{what}: rank {peer} is not another rank of this group (this is "
                             f"rank {self.rank} of {self.size})")  # fmt: skip

    # ----- what a traced step's all-reduce calls (tracegrad.core.ops.collectives)

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> Work:
        """Sum `send` over the ranks into `recv` (an array of its shape, contiguous or not)."""
        flat = np.ascontiguousarray(send).reshape(-1).copy()

        def run(number: int) -> None:
            self.all_reduce(flat, "sum", number)
            np.copyto(recv, flat.reshape(recv.shape))

        return self.submit("all_reduce", run)


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The contiguous `array`'s bytes, as a flat uint8 view (empty ones too)."""
    return array.reshape(-1).view(np.uint8)


def _nth(number: int) -> str:
    return "point-to-point message" if number == P2P else f"collective #{number}"

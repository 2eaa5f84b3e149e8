"""A minimal ZMTP 3.1 client (rfc.zeromq.org 23/ZMTP, 37/ZMTP): one request and its reply, as a
DEALER with the NULL mechanism, over the daemon's Unix socket. Stdlib only, for the agent's
hook: pyzmq's import alone costs more than a bare Python start-up.

One exchange per connection:
  greeting   both peers: signature ``FF 00*8 7F``, version 3.1, mechanism "NULL", as-server 0,
             filler: 64 bytes. The peer's major version is read first and must be 3.
  handshake  both peers: a READY command with the ``Socket-Type`` property (ours DEALER, an empty
             ``Identity`` as libzmq's DEALER sends; the peer's must be ROUTER). The request is
             sent only after the peer's READY: libzmq takes a message frame that arrives before
             it has finished its side of the handshake as a protocol error.
  request    the message's frames (MORE on every frame but the last); the reply is read frame by
             frame until one without MORE. A PING command is answered with PONG, any other
             command after the handshake is ignored (37/ZMTP: SUBSCRIBE/CANCEL do not concern a
             DEALER).

What goes wrong is one of three exceptions, so that the caller can choose: ``Unreachable``
(nobody listens: no socket file, connection refused), ``Unexpected`` (the peer is there but does
not speak what this module speaks: another greeting or version, another mechanism or socket type,
an ERROR command, a malformed frame, a connection closed during the greeting or handshake) and
``Lost`` (the peer closed the connection or went quiet after the request was sent). No call
outlives ``deadline`` (``time.monotonic()`` seconds).
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` would import enum and build its IntEnums
import time

VERSION = b"\x03\x01"
SIGNATURE_END = 0x7F
GREETING = (
    b"\xff" + b"\x00" * 8 + b"\x7f" + VERSION + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
)
MORE, LONG, COMMAND = 0x01, 0x02, 0x04
MAX_FRAME = 64 * 1024 * 1024  # far above the daemon's 4 MiB; a larger size is a broken stream


class ZmtpError(Exception):
    """Base of this module's errors."""


class Unreachable(ZmtpError):
    """Nobody listens on the socket (no file, connection refused, not a socket)."""


class Unexpected(ZmtpError):
    """The peer does not speak ZMTP 3.x NULL as a ROUTER, or broke the protocol."""


class Lost(ZmtpError):
    """The peer closed the connection or did not answer before the deadline."""


def request(path: str, frames: list[bytes], deadline: float) -> list[bytes]:
    """Send the message ``frames`` to the ROUTER listening on ``path``; its reply's frames."""
    conn = Connection(path, deadline)
    try:
        conn.handshake()
        conn.send_message(frames)
        return conn.recv_message()
    finally:
        conn.close()


def command(name: bytes, data: bytes = b"") -> bytes:
    """A command frame's body: the name's length and the name, then the command's data."""
    return bytes([len(name)]) + name + data


def properties(props: dict[bytes, bytes]) -> bytes:
    """READY's metadata: each name (1-byte length) and value (4-byte length)."""
    return b"".join(bytes([len(k)]) + k + len(v).to_bytes(4, "big") + v for k, v in props.items())


def frame(body: bytes, flags: int = 0) -> bytes:
    """One frame: flags, size (1 byte, or 8 with LONG when over 255), body."""
    if len(body) <= 0xFF:
        return bytes([flags, len(body)]) + body
    return bytes([flags | LONG]) + len(body).to_bytes(8, "big") + body


def parse_properties(data: bytes) -> dict[bytes, bytes]:
    props: dict[bytes, bytes] = {}
    i = 0
    while i < len(data):
        n = data[i]
        name = data[i + 1 : i + 1 + n]
        i += 1 + n
        if len(name) != n or i + 4 > len(data):
            raise Unexpected("malformed READY metadata")
        size = int.from_bytes(data[i : i + 4], "big")
        value = data[i + 4 : i + 4 + size]
        if len(value) != size:
            raise Unexpected("malformed READY metadata")
        props[name.lower()] = value  # property names are case-insensitive
        i += 4 + size
    return props


READY = frame(command(b"READY", properties({b"Socket-Type": b"DEALER", b"Identity": b""})), COMMAND)


class Connection:
    def __init__(self, path: str, deadline: float) -> None:
        self._deadline = deadline
        self._buf = bytearray()  # appended to: a reply of megabytes is not copied per chunk
        self._handshaken = False
        self.peer: dict[bytes, bytes] = {}  # the peer's READY properties, names in lower case
        left = self._left()  # before the socket exists: nothing to close when time is up
        try:
            self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        except OSError as exc:  # out of descriptors: another client may have a way
            raise Unexpected(f"socket: {exc}") from None
        try:
            self._sock.settimeout(left)
            self._sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            self.close()
            raise Unreachable(str(exc)) from None
        except OSError as exc:  # a timeout, a path too long, permissions: another client may do
            self.close()
            raise Unexpected(f"connect: {exc}") from None

    def close(self) -> None:
        self._sock.close()

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise Lost("deadline passed")
        return left

    def _send(self, data: bytes) -> None:
        try:
            self._sock.settimeout(self._left())
            self._sock.sendall(data)
        except TimeoutError:
            raise Lost("the peer took no more data before the deadline") from None
        except OSError as exc:  # EPIPE, ECONNRESET
            raise self._gone(f"send: {exc}") from None

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                self._sock.settimeout(self._left())
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except TimeoutError:
                raise Lost("no answer before the deadline") from None
            except OSError as exc:
                raise self._gone(f"recv: {exc}") from None
            if not chunk:
                raise self._gone("the peer closed the connection")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _gone(self, why: str) -> ZmtpError:
        # Before the handshake ends the peer may be refusing what we speak (another client may
        # do better); after it, the peer went away with our request.
        return Lost(why) if self._handshaken else Unexpected(why)

    def handshake(self) -> None:
        self._send(GREETING + READY)
        signature = self._take(10)
        if signature[0] != 0xFF or signature[9] & 0x01 != 0x01:
            raise Unexpected("not a ZMTP 3 greeting")
        major = self._take(1)[0]
        if major != 3:
            raise Unexpected(f"the peer speaks ZMTP major version {major}, not 3")
        rest = self._take(53)  # minor version, mechanism, as-server, filler
        mechanism = rest[1:21].rstrip(b"\x00")
        if mechanism != b"NULL":
            raise Unexpected(f"the peer wants the {mechanism!r} mechanism")
        flags, body = self._frame()
        if not flags & COMMAND:
            raise Unexpected("a message before the handshake")
        name, data = _split_command(body)
        if name == b"ERROR":
            reason = data[1 : 1 + data[0]] if data else b""
            raise Unexpected(f"the peer refused the handshake: {reason!r}")
        if name != b"READY":
            raise Unexpected(f"{name!r} instead of READY")
        self.peer = parse_properties(data)
        socket_type = self.peer.get(b"socket-type")
        if socket_type != b"ROUTER":
            raise Unexpected(f"the peer is a {socket_type!r} socket, not a ROUTER")
        self._handshaken = True

    def send_message(self, frames: list[bytes]) -> None:
        last = len(frames) - 1
        self._send(b"".join(frame(f, MORE if i < last else 0) for i, f in enumerate(frames)))

    def recv_message(self) -> list[bytes]:
        parts: list[bytes] = []
        while True:
            flags, body = self._frame()
            if flags & COMMAND:
                name, data = _split_command(body)
                if name == b"PING":  # TTL (2 bytes), then the context to echo (37/ZMTP)
                    self._send(frame(command(b"PONG", data[2:18]), COMMAND))
                continue
            parts.append(body)
            if not flags & MORE:
                return parts

    def _frame(self) -> tuple[int, bytes]:
        flags = self._take(1)[0]
        if flags & ~(MORE | LONG | COMMAND):
            raise Unexpected(f"reserved frame flags 0x{flags:02x}")
        size = int.from_bytes(self._take(8), "big") if flags & LONG else self._take(1)[0]
        if size > MAX_FRAME:
            raise Unexpected(f"a frame of {size} bytes")
        return flags, self._take(size)


def _split_command(body: bytes) -> tuple[bytes, bytes]:
    if not body or len(body) < 1 + body[0]:
        raise Unexpected("malformed command frame")
    return body[1 : 1 + body[0]], body[1 + body[0] :]

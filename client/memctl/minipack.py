"""The MessagePack the hook needs, stdlib only: ``memctl.protocol`` encodes with msgspec, whose
import (``typing``, ``re``, ``uuid``, ``decimal``, ``datetime`` and its own modules) costs more
than the rest of a hook's start-up together.

``pack`` writes what msgspec writes for the same values (the smallest form of every integer,
string, array and map header; floats as float64), so a request packed here is byte for byte
the request ``protocol.encode`` would send (tests/test_hook_wire.py checks both ways).
``unpack`` reads any MessagePack value but extension types, which no reply of ours carries.
"""

from __future__ import annotations

from _struct import pack as _spack
from _struct import unpack_from as _sunpack

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing would import ``re``
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 64  # nesting deeper than any reply of ours: refused, never a RecursionError


class UnpackError(ValueError):
    """Not a complete MessagePack value of a kind this module reads."""


def pack(obj: Any) -> bytes:
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _pack(obj: Any, out: bytearray) -> None:
    if obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif isinstance(obj, int):
        _pack_int(obj, out)
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        if len(data) < 32:
            out.append(0xA0 | len(data))
        else:
            _pack_length(len(data), b"\xd9", b"\xda", b"\xdb", out)
        out += data
    elif isinstance(obj, float):
        out += b"\xcb" + _spack(">d", obj)
    elif isinstance(obj, bytes):
        _pack_length(len(obj), b"\xc4", b"\xc5", b"\xc6", out)
        out += obj
    elif isinstance(obj, list | tuple):
        _pack_header(len(obj), 0x90, b"\xdc", b"\xdd", out)
        for item in obj:
            _pack(item, out)
    elif isinstance(obj, dict):
        _pack_header(len(obj), 0x80, b"\xde", b"\xdf", out)
        for key, value in obj.items():
            _pack(key, out)
            _pack(value, out)
    else:
        raise TypeError(f"cannot pack {type(obj).__name__}")


def _pack_length(n: int, b8: bytes, b16: bytes, b32: bytes, out: bytearray) -> None:
    """A str's or bin's length past its fix form: 8, 16 or 32 bits, the smallest that holds it."""
    if n < 0x100:
        out += b8 + _spack(">B", n)
    elif n < 0x10000:
        out += b16 + _spack(">H", n)
    else:
        out += b32 + _spack(">I", n)


def _pack_header(n: int, fix: int, b16: bytes, b32: bytes, out: bytearray) -> None:
    if n < 16:
        out.append(fix | n)
    elif n < 0x10000:
        out += b16 + _spack(">H", n)
    else:
        out += b32 + _spack(">I", n)


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    elif n >= 0:
        if n < 0x100:
            out += b"\xcc" + _spack(">B", n)
        elif n < 0x10000:
            out += b"\xcd" + _spack(">H", n)
        elif n < 0x100000000:
            out += b"\xce" + _spack(">I", n)
        else:
            out += b"\xcf" + _spack(">Q", n)  # struct.error past 2**64: msgspec refuses too
    elif n >= -32:
        out.append(n & 0xFF)
    elif n >= -0x80:
        out += b"\xd0" + _spack(">b", n)
    elif n >= -0x8000:
        out += b"\xd1" + _spack(">h", n)
    elif n >= -0x80000000:
        out += b"\xd2" + _spack(">i", n)
    else:
        out += b"\xd3" + _spack(">q", n)


def unpack(data: bytes) -> Any:
    """The one value ``data`` holds; ``UnpackError`` when it is not exactly one value."""
    try:
        obj, end = _unpack(data, 0, 0)
    except (IndexError, UnicodeDecodeError, TypeError) as exc:  # short, bad UTF-8, bad map key
        raise UnpackError(str(exc)) from None
    if end != len(data):
        raise UnpackError(f"{len(data) - end} bytes after the value")
    return obj


# Fixed-size scalars: first byte -> (struct format, size).
_SCALARS = {
    0xCA: (">f", 4),
    0xCB: (">d", 8),
    0xCC: (">B", 1),
    0xCD: (">H", 2),
    0xCE: (">I", 4),
    0xCF: (">Q", 8),
    0xD0: (">b", 1),
    0xD1: (">h", 2),
    0xD2: (">i", 4),
    0xD3: (">q", 8),
}
# Variable-size strings, binaries, arrays and maps: first byte -> (length format, size, kind).
_SIZED = {
    0xD9: (">B", 1, "str"),
    0xDA: (">H", 2, "str"),
    0xDB: (">I", 4, "str"),
    0xC4: (">B", 1, "bin"),
    0xC5: (">H", 2, "bin"),
    0xC6: (">I", 4, "bin"),
    0xDC: (">H", 2, "array"),
    0xDD: (">I", 4, "array"),
    0xDE: (">H", 2, "map"),
    0xDF: (">I", 4, "map"),
}


def _unpack(data: bytes, i: int, depth: int) -> tuple[Any, int]:
    b = data[i]
    i += 1
    if b < 0x80:
        return b, i
    if b >= 0xE0:
        return b - 0x100, i
    if 0xA0 <= b < 0xC0:
        return _str(data, i, b & 0x1F)
    if 0x90 <= b < 0xA0:
        return _array(data, i, b & 0x0F, depth)
    if 0x80 <= b < 0x90:
        return _map(data, i, b & 0x0F, depth)
    if b == 0xC0:
        return None, i
    if b == 0xC2:
        return False, i
    if b == 0xC3:
        return True, i
    scalar = _SCALARS.get(b)
    if scalar is not None:
        fmt, size = scalar
        if i + size > len(data):
            raise UnpackError("truncated number")
        return _sunpack(fmt, data, i)[0], i + size
    sized = _SIZED.get(b)
    if sized is None:
        raise UnpackError(f"unsupported type byte 0x{b:02x}")  # extensions, 0xc1
    fmt, size, kind = sized
    if i + size > len(data):
        raise UnpackError("truncated length")
    n = _sunpack(fmt, data, i)[0]
    i += size
    if kind == "str":
        return _str(data, i, n)
    if kind == "bin":
        if i + n > len(data):
            raise UnpackError("truncated binary")
        return data[i : i + n], i + n
    if kind == "array":
        return _array(data, i, n, depth)
    return _map(data, i, n, depth)


def _str(data: bytes, i: int, n: int) -> tuple[str, int]:
    if i + n > len(data):
        raise UnpackError("truncated string")
    return data[i : i + n].decode("utf-8"), i + n


def _array(data: bytes, i: int, n: int, depth: int) -> tuple[list[Any], int]:
    if depth >= MAX_DEPTH or n > len(data) - i:  # each item takes at least one byte
        raise UnpackError("array too deep or longer than its message")
    items = []
    for _ in range(n):
        item, i = _unpack(data, i, depth + 1)
        items.append(item)
    return items, i


def _map(data: bytes, i: int, n: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth >= MAX_DEPTH or 2 * n > len(data) - i:
        raise UnpackError("map too deep or longer than its message")
    result = {}
    for _ in range(n):
        key, i = _unpack(data, i, depth + 1)
        value, i = _unpack(data, i, depth + 1)
        result[key] = value  # an unhashable key (a list) raises TypeError: refused above
    return result, i

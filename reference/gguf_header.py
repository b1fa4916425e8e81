"""A bounds check of a GGUF file's header before gguf-py parses it (issue #27).

gguf-py's reader trusts the header's counts: a metadata array whose count a flipped byte made 2**40 is walked item
by item (minutes, or for ever), a string length past the file is sliced short and fails later with an IndexError.
`check_header(path)` walks the same layout (gguf/constants.py, GGUF v2 and v3) without building anything, and
checks every count and length against the bytes left in the file before it moves past them:

    magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv x      key (u64 length + bytes) | value type u32 | value
                value: a scalar, a string (u64 length + bytes), or an array (item type u32 | count u64 | items)
    n_tensors x name (u64 length + bytes) | n_dims u32 | n_dims x u64 | ggml type u32 | data offset u64

Its cost is linear in the header's bytes, whatever the counts claim.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from reference.weights import WeightsError

# gguf-py's GGUFValueType: UINT8 INT8 UINT16 INT16 UINT32 INT32 FLOAT32 BOOL STRING ARRAY UINT64 INT64 FLOAT64
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
MAX_DIMS = 4  # GGML_MAX_DIMS
TENSOR_INFO_MIN = 8 + 4 + 4 + 8  # an empty name, no dims, the type and the offset


class _Cursor:
    def __init__(self, path: Path, data: mmap.mmap | bytes) -> None:
        self.path, self.data, self.at = path, data, 0

    def take(self, n: int, what: str) -> int:
        """Move past `n` bytes; a WeightsError naming `what` when the file has fewer left."""
        left = len(self.data) - self.at
        if n > left:
            raise WeightsError(
                f"{self.path}: GGUF header: {what} needs {n} bytes at offset {self.at}; {left} left"
            )
        start, self.at = self.at, self.at + n
        return start

    def u32(self, what: str) -> int:
        return int(struct.unpack_from("<I", self.data, self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack_from("<Q", self.data, self.take(8, what))[0])

    def count(self, what: str, item_bytes: int) -> int:
        """A u64 count of items of at least `item_bytes` each, checked against the bytes left."""
        n = self.u64(what)
        if n * item_bytes > len(self.data) - self.at:
            raise WeightsError(
                f"{self.path}: GGUF header: {what} is {n}, more than the {len(self.data) - self.at} bytes left hold"
            )
        return n

    def string(self, what: str) -> None:
        self.take(self.u64(f"{what} length"), what)

    def value(self, vtype: int, what: str) -> None:
        if vtype in SCALAR_BYTES:
            self.take(SCALAR_BYTES[vtype], what)
        elif vtype == STRING:
            self.string(what)
        elif vtype == ARRAY:
            item = self.u32(f"{what} item type")
            if item == ARRAY:
                raise WeightsError(f"{self.path}: GGUF header: {what} is an array of arrays")
            n = self.count(f"{what} count", SCALAR_BYTES.get(item, 8))
            if item in SCALAR_BYTES:
                self.take(n * SCALAR_BYTES[item], what)
            else:
                for _ in range(n):
                    self.value(item, what)
        else:
            raise WeightsError(f"{self.path}: GGUF header: {what} has unknown value type {vtype}")


def check_header(path: Path) -> None:
    """WeightsError naming the file, the field and the offset when a count or length in the header of the GGUF at
    `path` runs past the file; None when the whole header fits."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < 4 + 4 + 8 + 8:
            raise WeightsError(f"{path}: GGUF header: {size} bytes, shorter than a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            c = _Cursor(path, data)
            if data[:4] != b"GGUF":
                return  # not GGUF at all: gguf-py names it
            c.take(4, "magic")
            c.u32("version")
            n_tensors = c.u64("tensor count")
            n_kv = c.count("metadata key count", 8 + 4 + 1)
            for i in range(n_kv):
                c.string(f"metadata key {i}")
                c.value(c.u32(f"metadata key {i} type"), f"metadata key {i}")
            if n_tensors * TENSOR_INFO_MIN > len(data) - c.at:
                raise WeightsError(
                    f"{path}: GGUF header: tensor count is {n_tensors}, more than the file holds"
                )
            for i in range(n_tensors):
                c.string(f"tensor {i} name")
                dims = c.u32(f"tensor {i} dimension count")
                if dims > MAX_DIMS:
                    raise WeightsError(
                        f"{path}: GGUF header: tensor {i} has {dims} dimensions (at most {MAX_DIMS})"
                    )
                c.take(8 * dims + 4 + 8, f"tensor {i} info")

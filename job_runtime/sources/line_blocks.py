"""Line formats cut into blocks that end at record ends (see
:mod:`job_runtime.sources.line_reader`).

A file of a line format (``text``, ``jsonl``, ``csv``) is read in blocks of about
``block_size`` bytes, each cut after the last line end it holds (a line longer than
the block extends it to that line's end; a CSV value in quotes may hold a line end,
so CSV blocks are cut only where the quotes are balanced). The cut depends only on
where the block starts and on ``block_size``, so reading again from a block's start
gives the same block and the same rows.
"""

from __future__ import annotations

from typing import IO


def _balanced_cut(data: bytes | bytearray, *, before: int) -> int:
    """The index after the last line end before ``before`` outside double quotes, or -1.

    ``data`` starts at a record boundary, so a line end ends a record when the
    quotes before it are balanced (CSV escapes a quote by doubling it, which keeps
    the count even).
    """
    end = data.rfind(b"\n", 0, before)
    if end < 0:
        return -1
    odd = data.count(b'"', 0, end) % 2
    while odd:
        previous = data.rfind(b"\n", 0, end)
        if previous < 0:
            return -1
        odd ^= data.count(b'"', previous, end) % 2
        end = previous
    return end + 1


def _cut(data: bytes | bytearray, *, quoted: bool) -> int:
    """The index after the last line end of ``data`` that ends a record, or -1."""
    if quoted and b'"' in data:
        return _balanced_cut(data, before=len(data))
    end = data.rfind(b"\n")
    return end + 1 if end >= 0 else -1


def _first_cut(data: bytes | bytearray, *, quoted: bool) -> int:
    """The index after the first line end of ``data`` that ends a record, or -1."""
    start = 0
    odd = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return -1
        if quoted:
            odd ^= data.count(b'"', start, end) % 2
        if not odd:
            return end + 1
        start = end + 1


class Blocks:
    """A file cut into blocks that end at record ends, starting at ``start``.

    Each block is the ``block_size`` bytes from its start cut after their last
    record end, or, when they hold none, extended to the first record end after
    them (or to the file's end). What follows the cut is kept and begins the next
    block, so the file is read once and in order.
    """

    def __init__(self, *, file: IO[bytes], start: int, block_size: int, quoted: bool) -> None:
        self._file = file
        self._block_size = block_size
        self._quoted = quoted
        self._carry = b""
        self.next_start = start
        """Where the block that :meth:`read` returns next starts."""
        file.seek(start)

    def _read(self, size: int) -> bytes:
        parts: list[bytes] = []
        while size > 0:
            part = self._file.read(size)
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self) -> tuple[int, bytes] | None:
        """The next block and where it starts, or ``None`` at the file's end."""
        start = self.next_start
        data = self._carry + self._read(self._block_size - len(self._carry))
        self._carry = b""
        if not data:
            return None
        if len(data) < self._block_size:
            block = data
        else:
            end = _cut(data, quoted=self._quoted)
            if end < 0:
                grown = bytearray(data)
                while end < 0:
                    more = self._read(self._block_size)
                    if not more:
                        end = len(grown)
                        break
                    searched = len(grown)
                    grown += more
                    if self._quoted:
                        end = _cut(grown, quoted=True)
                    else:
                        found = grown.find(b"\n", searched)
                        end = grown.rfind(b"\n") + 1 if found >= 0 else -1
                data = bytes(grown)
            block, self._carry = data[:end], data[end:]
        self.next_start = start + len(block)
        return start, block


def read_header(file: IO[bytes], *, chunk: int) -> bytes:
    """A CSV file's first record (its header), with its line end."""
    file.seek(0)
    data = bytearray()
    while True:
        more = file.read(chunk)
        if not more:
            return bytes(data)
        searched = max(0, len(data) - 1)
        data += more
        end = _first_cut(data, quoted=True) if b'"' in data else data.find(b"\n", searched) + 1
        if end > 0:
            return bytes(data[:end])

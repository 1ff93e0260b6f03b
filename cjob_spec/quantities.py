"""Memory quantities in the forms Kubernetes and Spark users write.

Accepted forms (the number may be an integer or a decimal such as ``1.5Gi``):

* Kubernetes binary suffixes ``Ki Mi Gi Ti Pi Ei`` (powers of 1024);
* Kubernetes decimal suffixes ``K M G T P E`` (powers of 1000; upper-case ``K`` is
  accepted as well as ``k`` would be in Kubernetes, see below);
* Spark suffixes, lower-case, ``b k m g t p`` and ``kb mb gb tb pb`` (powers of 1024,
  as in ``spark.executor.memory=2g``);
* a bare integer: bytes.

The one clash between the two worlds is lower-case ``k`` and ``m``: Kubernetes reads
``m`` as "milli" (meaningless for memory) and ``k`` as 1000, Spark reads them as
KiB and MiB. Memory settings here follow Spark for lower-case suffixes, because
``512m`` in a Spark job spec always means 512 MiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cjob_spec.errors import QuantityFormatError

KIB = 1024
MIB = 1024**2
GIB = 1024**3

_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "b": 1,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "E": 1000**6,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "p": 1024**5,
    "kb": 1024,
    "mb": 1024**2,
    "gb": 1024**3,
    "tb": 1024**4,
    "pb": 1024**5,
}

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$")


def parse_memory_bytes(text: str) -> int:
    """Return the number of bytes ``text`` denotes, or raise QuantityFormatError."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityFormatError(
            text=text, problem="must be a memory quantity like '2Gi', '512Mi' or '2g'"
        )
    number, suffix = match.groups()
    multiplier = _MULTIPLIERS.get(suffix)
    if multiplier is None:
        raise QuantityFormatError(
            text=text,
            problem=f"unknown unit {suffix!r} (use Ki, Mi, Gi, Ti, K, M, G, T or Spark's k, m, g, t)",
        )
    value = int(float(number) * multiplier) if "." in number else int(number) * multiplier
    if value <= 0:
        raise QuantityFormatError(text=text, problem="must be greater than zero")
    return value


def format_kubernetes_memory(size: int) -> str:
    """Render bytes in the largest exact Kubernetes binary unit (``2Gi``, ``1536Mi``)."""
    for suffix, multiplier in (("Ti", 1024**4), ("Gi", GIB), ("Mi", MIB), ("Ki", KIB)):
        if size % multiplier == 0:
            return f"{size // multiplier}{suffix}"
    return str(size)


def format_spark_memory(size: int) -> str:
    """Render bytes as Spark expects them: whole MiB (``2048m``), at least ``1m``."""
    return f"{max(1, -(-size // MIB))}m"


@dataclass(frozen=True)
class Memory:
    """A parsed memory quantity that remembers how the user wrote it."""

    bytes: int
    text: str

    @classmethod
    def parse(cls, text: str) -> Memory:
        return cls(bytes=parse_memory_bytes(text), text=text)

    def to_spark(self) -> str:
        return format_spark_memory(self.bytes)

    def __str__(self) -> str:
        return self.text

"""The safetensors format as the expert store reads it: the header checked before anything
is parsed, and tensors that are views of the bytes already hashed."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import torch

# safetensors dtype names -> torch dtypes (also used by trainer/mmap_weights.py)
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_HEADER_BYTES = 1 << 20  # a safetensors header larger than this is not one of ours


def header_length(prefix: bytes, size: int) -> int:
    """The safetensors header length the 8-byte ``prefix`` announces, checked against
    :data:`MAX_HEADER_BYTES` and the file's ``size``; ValueError if it does not fit."""
    if size < 8 or len(prefix) < 8:
        raise ValueError(f"file of {size} bytes is too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", prefix[:8])
    if header_len > min(MAX_HEADER_BYTES, size - 8):
        raise ValueError(
            f"header length {header_len} does not fit in a file of {size} bytes "
            f"(at most {MAX_HEADER_BYTES} bytes of header are read)"
        )
    return header_len


def check_safetensors_header(path: str | os.PathLike[str]) -> None:
    """Refuse (ValueError) a file whose header is too long to parse, before a library does."""
    with open(path, "rb") as handle:
        header_length(handle.read(8), os.fstat(handle.fileno()).st_size)


def parse_safetensors(buf: Any, size: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors viewing ``buf`` (a writable buffer of ``size`` bytes) and the file's metadata.

    Raises ValueError describing the first structural problem found (other exceptions
    are possible for hostile headers; the caller treats any of them as corruption).
    """
    header_len = header_length(bytes(buf[:8]), size)
    try:
        header = json.loads(bytes(buf[8 : 8 + header_len]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"tensor {name!r} has a malformed header entry") from exc
        count = 1
        for dim in shape:
            count *= dim
        itemsize = torch.empty((), dtype=dtype).element_size()
        if begin < 0 or end != begin + count * itemsize or base + end > size:
            raise ValueError(f"tensor {name!r} data [{begin}, {end}) is out of bounds or mis-sized")
        flat = (
            torch.frombuffer(buf, dtype=dtype, count=count, offset=base + begin)
            if count
            else torch.empty(0, dtype=dtype)
        )
        tensors[name] = flat.view(shape)
    return tensors, metadata


def sha256_of(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file (what the manifest records for ``weights.safetensors``)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

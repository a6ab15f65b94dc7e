"""Sizes and counts as people write them: ``80GiB``, ``2TB``, ``150M`` (no torch imported).

Example
-------
>>> parse_bytes("80GiB"), parse_bytes("1.5T"), parse_bytes("512MB")
(85899345920, 1500000000000, 512000000)
>>> parse_count("150M")
150000000
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    """``"80GiB"`` -> bytes (decimal k/M/G/T or binary KiB/MiB/GiB/TiB; a bare number: bytes)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"size {text!r}: write a number with a unit, e.g. 80GiB, 512MB, 2TB")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_count(text: str) -> int:
    """``"150M"`` -> 150000000 (k/M/G/B suffixes, decimal)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kKmMgGbB]?)\s*", str(text))
    if match is None:
        raise ValueError(f"count {text!r}: write a number, e.g. 150M, 2.5k, 1e6")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)

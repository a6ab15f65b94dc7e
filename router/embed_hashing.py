"""The hashed TF-IDF embedding of a whole batch of texts at once, in numpy.

(~450 lines in one file: every step must stay bit-identical to ``embed_one``, and reads
best in one place beside the others.)

Computes exactly the vectors of :meth:`router.embed_tfidf.HashedTfidfEmbedder.embed_one`
(bit for bit: ``tests/router/test_embed_fast.py`` checks every bundled document), with a
few dozen array operations per batch instead of ~150 small ones per text:

- the texts of a batch are joined into one byte array (one separator byte between
  them); word boundaries, the CRC-32 of every word (a table-driven CRC run over all words
  of the batch at once, one byte position per step), the rolling n-gram hashes of every
  order (each order extends the previous one: ``G_n = G_{n-1} * P + byte``) and the form
  codes are computed over the whole batch; windows that cross two texts are dropped;
- every occurrence's code becomes its feature hash and each (text, block) segment is
  sorted on those hashes, so its distinct features come out ascending, as ``np.unique``'s
  did, and the per-bucket sums of the one ``bincount`` over the batch add the same terms
  in the same order as the per-text ``bincount`` did; norms use the same ``ndarray.dot``;
- the IDF of each feature is found through an open-addressing hash table over the IDF
  table (one gather for most features instead of a binary search).

Its temporaries are a few MiB per batch: :func:`router.allocator.keep_freed_memory` keeps
glibc from handing them back to the kernel after every batch.

Only the hashed TF-IDF embedder uses it (:meth:`HashedTfidfEmbedder.embed`).

Example
-------
>>> from router.embed_tfidf import HashedTfidfEmbedder
>>> emb = HashedTfidfEmbedder(dim=64, shape_weight=1.5)
>>> texts = ["def f(x):\\n    return x", "", "Die Würde des Menschen"]
>>> fast = embed_batch(emb, texts)
>>> bool((fast == np.stack([emb.embed_one(t) for t in texts])).all())
True
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from router.allocator import keep_freed_memory
from router.features import (
    _ASCII_CLASSES,
    _M1,
    _M2,
    _S33,
    _SHAPE_SALT,
    _WORD,
    _WORD_SALT,
    wide_letter_classes,
)

if TYPE_CHECKING:
    from router.embed_tfidf import HashedTfidfEmbedder
    from router.idf import IdfTable

_POLY = np.uint64(0x100000001B3)  # router.features.ngram_hashes' multiplier
_TOP_BIT = np.uint64(1 << 63)
_SEPARATOR = " "  # between two texts of a batch: not a word character
_CRC_VECTOR_MIN = 32  # words still being hashed below this count finish with zlib.crc32


def _crc_table() -> np.ndarray:
    """zlib's CRC-32 table (reflected polynomial 0xEDB88320); ``(256,)`` uint32."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_CRC = _crc_table()
_ASCII_WORD = np.array([bool(_WORD.fullmatch(chr(c))) for c in range(128)])  # (128,)
_BYTE_WORD = np.concatenate([_ASCII_WORD, np.zeros(128, dtype=bool)])  # (256,)
_RUN = np.zeros(128, dtype=bool)  # form symbols whose runs collapse (router.features)
_RUN[[ord("a"), ord("A"), ord("0"), ord(" ")]] = True


def fmix64(h: np.ndarray) -> np.ndarray:
    """:func:`router.features.fmix64` in place (``h`` is overwritten and returned)."""
    t = h >> _S33
    h ^= t
    h *= _M1
    np.right_shift(h, _S33, out=t)
    h ^= t
    h *= _M2
    np.right_shift(h, _S33, out=t)
    h ^= t
    return h


def normalise_texts(texts: list[str], max_chars: int) -> list[str]:
    """:func:`router.features.normalise_text` of each text (``str.split`` and the regex
    ``\\s`` both split on ``str.isspace`` characters)."""
    return [" ".join(text[:max_chars].lower().split()) for text in texts]


def embed_batch(embedder: HashedTfidfEmbedder, texts: list[str]) -> np.ndarray:
    """``embedder``'s vectors of ``texts``: ``(len(texts), dim)`` float32, as ``embed_one``.

    Raises
    ------
    UnicodeEncodeError
        If a text holds a lone surrogate in its first ``max_chars`` characters (as
        ``embed_one`` does).
    """
    keep_freed_memory()  # a batch's temporaries are reused, not page-faulted in anew
    dim = embedder.dim
    out = np.zeros((len(texts), dim), dtype=np.float32)  # (N, dim)
    contents = normalise_texts(texts, embedder.max_chars)
    keep = [i for i, content in enumerate(contents) if content]
    if not keep:
        return out
    contents = [contents[i] for i in keep]
    blocks: list[Block] = []  # embed_one's blocks, in its order
    data, starts = _joined_bytes(contents)
    if embedder.word_weight > 0:
        blocks.append(Block([_word_codes(contents, data, starts)], fmix64, embedder.word_weight))
    grams = _ngram_codes(data, starts, embedder.char_ngrams)
    blocks.extend(Block([grams[n]], fmix64, 1.0) for n in embedder.char_ngrams)
    if embedder.shape_weight > 0:
        forms = _shape_codes([texts[i] for i in keep], embedder.max_chars, embedder.shape_ngrams)
        blocks.append(Block(forms, _form_key, embedder.shape_weight))
    projected = _project(blocks, len(keep), embedder)  # (S, B, dim)
    vec = np.zeros((len(keep), dim), dtype=np.float64)  # (B, dim)
    for block, rows in zip(blocks, projected, strict=True):
        vec += block.weight * rows
    norms = _row_norms(vec)  # (B,)
    good = norms > 0
    out[np.asarray(keep)[good]] = (vec[good] / norms[good, None]).astype(np.float32)
    return out


# One text's features of a block are values[offsets[k]:offsets[k + 1]] of each of its parts
Part = tuple[np.ndarray, np.ndarray]  # (values (H,) uint64, offsets (B + 1,) int64)


class Block(NamedTuple):
    """One of ``embed_one``'s feature blocks over the batch.

    ``parts`` hold each feature's *code*, a value that ``key`` (a bijection of uint64,
    applied in place) turns into the feature hash ``embed_one`` uses.
    """

    parts: list[Part]
    key: Callable[[np.ndarray], np.ndarray]
    weight: float


def _form_key(codes: np.ndarray) -> np.ndarray:
    """:func:`router.features.shape_hashes`' hash of a form n-gram's rolling code."""
    return fmix64(fmix64(codes) ^ _SHAPE_SALT)  # salted: form keys never meet content's


def _joined_bytes(contents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of ``contents`` joined by one separator byte, and where each text
    starts (``(B + 1,)``; the last entry is one past the end plus one)."""
    encoded = [content.encode("utf-8") for content in contents]
    lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=starts[1:])
    data = np.frombuffer(_SEPARATOR.encode().join(encoded), dtype=np.uint8)  # (bytes,)
    return data, starts


def _word_codes(contents: list[str], data: np.ndarray, starts: np.ndarray) -> Part:
    """The salted CRC-32 of every ``\\w+`` word (its key: fmix64), text after text."""
    is_word = _word_bytes(contents, data).view(np.int8)  # (bytes,)
    edges = np.diff(is_word, prepend=np.int8(0), append=np.int8(0))  # (bytes + 1,)
    first = np.flatnonzero(edges == 1)  # (W,) start byte of each word
    length = np.flatnonzero(edges == -1) - first  # (W,)
    crc = _crc32_many(data, first, length, _WORD_SALT)  # (W,) uint32
    return crc.astype(np.uint64), np.searchsorted(first, starts)


def _word_bytes(contents: list[str], data: np.ndarray) -> np.ndarray:
    """Whether each byte of ``data`` (valid UTF-8) belongs to a character that ``\\w``
    matches: ASCII by a table; each multi-byte character decoded from its bytes, tested
    once per distinct code point, and spread over its bytes."""
    word = _BYTE_WORD[data]  # (bytes,) False for every byte of a multi-byte character
    high = np.flatnonzero(data >= 0x80)  # (H,) bytes of multi-byte characters
    if not high.size:
        return word
    leads = high[data[high] >= 0xC0]  # (C,) the first byte of each such character
    first = data[leads].astype(np.uint32)
    width = 2 + (first >= 0xE0) + (first >= 0xF0)  # (C,) its UTF-8 length
    code = first & (np.uint32(0x7F) >> width)
    for k in range(1, 4):
        more = width > k
        follow = data[np.where(more, leads + k, leads)] & np.uint8(0x3F)
        code = np.where(more, (code << np.uint32(6)) | follow, code)
    wide, which = np.unique(code, return_inverse=True)
    wide_word = np.array([bool(_WORD.fullmatch(chr(c))) for c in wide.tolist()], dtype=bool)
    owner = np.searchsorted(leads, high, side="right") - 1  # (H,) each byte's character
    word[high] = wide_word[which][owner]
    return word


def _crc32_many(data: np.ndarray, first: np.ndarray, length: np.ndarray, salt: int) -> np.ndarray:
    """``zlib.crc32(data[first:first + length], salt)`` of every word; ``(W,)`` uint32.

    All words advance one byte per step, longest first; once fewer than
    ``_CRC_VECTOR_MIN`` words are still running, those are hashed again by ``zlib.crc32``.
    """
    order = np.argsort(-length, kind="stable")  # (W,) longest first
    first, shorter = first[order], -length[order]  # shorter: ascending
    crc = np.full(order.size, ~np.uint32(salt), dtype=np.uint32)  # (W,)
    step = 0
    while True:
        running = int(np.searchsorted(shorter, -step, side="left"))  # words longer than step
        if running < _CRC_VECTOR_MIN:
            break
        part = crc[:running]
        byte = data[first[:running] + step]  # (running,)
        crc[:running] = _CRC[(part ^ byte) & np.uint32(0xFF)] ^ (part >> np.uint32(8))
        step += 1
    crc = ~crc
    if running:
        raw = data.tobytes()
        for i in range(running):
            start = int(first[i])
            crc[i] = zlib.crc32(raw[start : start - int(shorter[i])], salt)
    result = np.empty_like(crc)
    result[order] = crc
    return result


_SEEDS = [np.uint64(n * pow(0x100000001B3, n, 1 << 64) % (1 << 64)) for n in range(65)]


def _rolling(codes: np.ndarray, ngrams: tuple[int, ...]) -> dict[int, np.ndarray]:
    """``router.features.ngram_hashes`` (before fmix64) of each order in ``ngrams``: the
    seeded polynomial ``n * P**n + sum(code[i + j] * P**(n - 1 - j))`` mod 2**64."""
    out: dict[int, np.ndarray] = {}
    wanted = sorted(set(ngrams))
    if not wanted:
        return out
    codes = codes.astype(np.uint64)
    total = codes.copy()  # (L,) G_1, then G_n in total[:count], in place
    for n in range(1, wanted[-1] + 1):
        if n > 1:
            count = max(codes.size - n + 1, 0)
            total = total[:count]
            total *= _POLY
            total += codes[n - 1 : n - 1 + count]
        if n in wanted:
            out[n] = total + _SEEDS[n]
    return out


def _inside(size: int, boundaries: np.ndarray, n: int, count: int) -> np.ndarray:
    """Mask of the ``count`` n-gram windows of a ``size``-long array that cross none of
    ``boundaries`` (the first index of each text but the first); ``(count,)`` bool."""
    inside = np.ones(count, dtype=bool)
    if n > 1 and boundaries.size and count:
        crossing = (boundaries[:, None] - np.arange(1, n)).ravel()  # window starts
        inside[crossing[(crossing >= 0) & (crossing < count)]] = False
    return inside


def _window_offsets(lengths: np.ndarray, n: int) -> np.ndarray:
    """Where each text's n-gram windows start among the kept ones; ``(B + 1,)``."""
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(np.maximum(lengths - n + 1, 0), out=offsets[1:])
    return offsets


def _ngram_codes(data: np.ndarray, starts: np.ndarray, ngrams: tuple[int, ...]) -> dict:
    """Byte n-gram rolling codes of every order (windows inside one text; key: fmix64),
    text after text."""
    lengths = np.diff(starts) - 1  # (B,) bytes of each text
    out = {}
    for n, hashes in _rolling(data, ngrams).items():
        # a window holding a separator crosses into the next text: as if one byte longer
        inside = _inside(data.size, starts[1:-1], n + 1, hashes.size)
        out[n] = hashes[inside], _window_offsets(lengths, n)
    return out


def _shape_codes(texts: list[str], max_chars: int, ngrams: tuple[int, ...]) -> list[Part]:
    """The rolling codes of :func:`router.features.shape_hashes`' n-grams (key:
    :func:`_form_key`), one part per order."""
    classes = [text[:max_chars].translate(_ASCII_CLASSES) for text in texts]
    lengths = np.fromiter((len(c) for c in classes), dtype=np.int64, count=len(classes))
    firsts = np.zeros(len(texts), dtype=np.int64)  # each text's first character
    np.cumsum(lengths[:-1], out=firsts[1:])
    codes = wide_letter_classes(
        np.frombuffer("".join(classes).encode("utf-32-le", "surrogatepass"), np.uint32), firsts
    )
    keep = np.ones(codes.size, dtype=bool)  # (L,)
    if codes.size > 1:
        runs = np.zeros(codes.size - 1, dtype=bool)
        low = codes[1:] < 128
        runs[low] = _RUN[codes[1:][low]]
        keep[1:] = (codes[1:] != codes[:-1]) | ~runs
        keep[firsts] = True
    kept = np.add.reduceat(keep, firsts).astype(np.int64)  # (B,) codes of each text
    codes = codes[keep]
    boundaries = np.cumsum(kept)[:-1]
    parts = []
    for n, hashes in _rolling(codes, ngrams).items():
        inside = _inside(codes.size, boundaries, n, hashes.size)
        parts.append((n, (hashes[inside], _window_offsets(kept, n))))
    by_order = dict(parts)
    return [by_order[n] for n in ngrams]


def _project(blocks: list[Block], texts: int, embedder: HashedTfidfEmbedder) -> np.ndarray:
    """Each (block, text) segment's TF-IDF weights signed-hashed into ``dim`` and made unit
    norm, as ``HashedTfidfEmbedder._project`` does for one; ``(blocks, texts, dim)``."""
    dim = embedder.dim
    flat, bounds = _sorted_segments(_keyed_parts(blocks), texts)  # (T,), (S * B + 1,)
    fresh = np.empty(flat.size, dtype=bool)
    fresh[0:1] = True
    np.not_equal(flat[1:], flat[:-1], out=fresh[1:])
    fresh[bounds[:-1][bounds[:-1] < flat.size]] = True
    first = np.flatnonzero(fresh)  # (F,) first occurrence of each segment's feature
    feature = flat[first]  # each segment's distinct features, ascending as np.unique's
    counts = np.diff(first, append=flat.size)  # (F,)
    per_segment = np.diff(np.searchsorted(first, bounds))  # (S * B,) features of each
    segment = np.repeat(np.arange(bounds.size - 1), per_segment)  # (F,)
    weights = _tf_weights(counts, embedder.tf_cap) * _idf_index(embedder.idf).lookup(feature)
    # the top bit is the sign; negating a float is flipping its sign bit
    signed = weights.view(np.uint64)
    signed ^= feature & _TOP_BIT
    signed = signed.view(np.float64)
    if dim & (dim - 1) == 0:
        bins = (feature & np.uint64(dim - 1)).view(np.int64)  # (F,) buckets, then bins
    else:
        bins = (feature % np.uint64(dim)).view(np.int64)
    bins += segment * dim  # (F,)
    # bincount adds each bin's terms in input order: ascending feature hash, as embed_one's
    out = np.bincount(bins, weights=signed, minlength=(bounds.size - 1) * dim)
    out = out.astype(np.float64, copy=False)  # (no feature at all: bincount gives int64)
    out = out.reshape(bounds.size - 1, dim)  # (S * B, dim)
    norms = _row_norms(out)
    norms[norms == 0] = 1.0  # an all-zero row stays as it is
    out /= norms[:, None]
    return out.reshape(len(blocks), texts, dim)


def _keyed_parts(blocks: list[Block]) -> list[list[Part]]:
    """Each block's parts with codes turned into feature hashes (``key`` works in place;
    a part that two blocks share, as a repeated n-gram order does, is keyed once)."""
    done: dict[int, np.ndarray] = {}
    for block in blocks:
        for values, _ in block.parts:
            if id(values) not in done:
                done[id(values)] = block.key(values)
    return [[(done[id(values)], offsets) for values, offsets in block.parts] for block in blocks]


def _sorted_segments(blocks: list[list[Part]], texts: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (block, text) segment's features, each segment sorted, block after block;
    and where each segment starts (``(S * B + 1,)``)."""
    sizes = np.zeros((len(blocks), texts), dtype=np.int64)
    for b, parts in enumerate(blocks):
        for _, offsets in parts:
            sizes[b] += np.diff(offsets)
    bounds = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes.ravel(), out=bounds[1:])
    flat = np.empty(int(bounds[-1]), dtype=np.uint64)
    for b, parts in enumerate(blocks):
        base = int(bounds[b * texts])
        if len(parts) == 1:
            values, _ = parts[0]
            flat[base : base + values.size] = values
        ends = bounds[b * texts + 1 : (b + 1) * texts + 1].tolist()
        spans = [(values, offsets.tolist()) for values, offsets in parts]
        start = base
        for k, end in enumerate(ends):
            view = flat[start:end]
            if len(spans) > 1:
                np.concatenate([v[o[k] : o[k + 1]] for v, o in spans], out=view)
            view.sort()
            start = end
    return flat, bounds


def _tf_weights(counts: np.ndarray, tf_cap: float) -> np.ndarray:
    """``min(1 + log(count), tf_cap)`` of each count, one ``np.log`` per distinct count."""
    table = np.minimum(1.0 + np.log(np.arange(1, int(counts.max(initial=0)) + 1)), tf_cap)
    return table[counts - 1]


def _row_norms(rows: np.ndarray) -> np.ndarray:
    """``np.linalg.norm`` of each row, computed as it computes one (``sqrt(x.dot(x))``),
    so the float64 sums are the same; ``(R,)``."""
    return np.array([math.sqrt(row.dot(row)) for row in rows], dtype=np.float64)


class _IdfIndex:
    """``IdfTable.lookup`` (the same float64 values) through an open-addressing hash table:
    a feature's home slot is its top ``bits`` bits, linear probing, load ~0.2. The most
    common features (lowest IDF) are placed first, so they sit in their home slots and
    take one gather. A slot holds its key and its value's bits side by side, as one
    complex128 (a 1-D ``take`` of 16-byte items: one cache miss per probe, and several
    times faster than a ``take`` of rows)."""

    def __init__(self, idf: IdfTable, bits: int = 18) -> None:
        self.idf = idf
        self.shift = np.uint64(64 - bits)
        self.mask = (1 << bits) - 1
        if idf.hashes.size == 0:  # no IDF: lookup answers idf_max without a table
            return
        # a key no table entry has marks an empty slot (it may equal a feature: that one
        # then "finds" the empty slot's value, idf_max, which is its weight anyway)
        free = (k for k in range(idf.hashes.size + 1) if not _holds(idf.hashes, k))
        self.empty = np.uint64(next(free))
        pairs = np.empty((1 << bits, 2), dtype=np.uint64)  # (slots, [key, value bits])
        pairs[:, 0] = self.empty
        pairs[:, 1] = np.float64(idf.idf_max).view(np.uint64)
        home = (idf.hashes >> self.shift).astype(np.int64)  # (F,)
        # each round places one entry in each free slot asked for: the first asker wins,
        # so every home slot goes to its most common feature
        pending = np.argsort(idf.idf, kind="stable")
        step = np.zeros(idf.hashes.size, np.int64)
        while pending.size:
            slot = (home[pending] + step[pending]) & self.mask
            free_slot = pairs[slot, 0] == self.empty
            _, winner = np.unique(slot[free_slot], return_index=True)
            placed = pending[free_slot][winner]
            pairs[slot[free_slot][winner], 0] = idf.hashes[placed]
            pairs[slot[free_slot][winner], 1] = idf.idf[placed].astype(np.float64).view(np.uint64)
            left = np.ones(pending.size, dtype=bool)
            left[np.flatnonzero(free_slot)[winner]] = False
            pending = pending[left]
            step[pending] += 1
        self.slots = pairs.view(np.complex128).ravel()  # (slots,)

    def lookup(self, features: np.ndarray) -> np.ndarray:
        if self.idf.hashes.size == 0:
            return np.full(features.shape, self.idf.idf_max)
        slot = np.right_shift(features, self.shift).view(np.int64)  # (F,) home slots
        found = self.slots.take(slot).view(np.uint64).reshape(-1, 2)  # (F, [key, value])
        keys = found[:, 0]
        out = found[:, 1].view(np.float64)  # right where the key matches or slot is empty
        todo = np.flatnonzero((keys != features) & (keys != self.empty))
        while todo.size:
            step = (slot[todo] + 1) & self.mask
            slot[todo] = step
            found = self.slots.take(step).view(np.uint64).reshape(-1, 2)
            out[todo] = found[:, 1].view(np.float64)
            todo = todo[(found[:, 0] != features[todo]) & (found[:, 0] != self.empty)]
        return out


def _holds(sorted_keys: np.ndarray, key: int) -> bool:
    pos = int(np.searchsorted(sorted_keys, np.uint64(key)))
    return pos < sorted_keys.size and int(sorted_keys[pos]) == key


def _idf_index(idf: IdfTable) -> _IdfIndex:
    """The table's index, built once and kept on the table itself (it lives as long)."""
    index = idf.__dict__.get("_hash_index")
    if index is None:
        index = idf.__dict__["_hash_index"] = _IdfIndex(idf)  # (a frozen dataclass)
    return index

"""Open the expert store a configuration names: a directory, or an S3-compatible bucket.

Every command that opens a store (trainer, serve, monitor, ``worx experts``) goes through
:func:`open_store`, so they agree on what ``experts.store_url`` means.
"""

from __future__ import annotations

import os
from typing import Any

from experts.store import ExpertStore


def open_store(
    store_url: str,
    local_dir: str | os.PathLike[str],
    trunk_fingerprint: str | None,
    *,
    create: bool = True,
    **options: Any,
) -> ExpertStore:
    """The store at ``store_url`` (``s3://bucket/prefix``) with ``local_dir`` as its local
    cache, or, with an empty ``store_url``, the directory store rooted at ``local_dir``.

    ``options`` are :class:`~experts.store.ExpertStore`'s (LRU budget, quarantine,
    retention). Raises :class:`~experts.object_store.ObjectStoreError` (an ``OSError``)
    when the bucket does not exist, refuses the credentials or cannot be reached, and
    ValueError for a URL that is not ``s3://bucket/prefix``.
    """
    if not store_url:
        return ExpertStore(local_dir, trunk_fingerprint, create=create, **options)
    from experts.object_store import S3Backend

    backend = S3Backend(
        store_url, local_dir, stale_after_s=float(options.get("stale_tmp_after_s", 3600))
    )
    return ExpertStore(backend, trunk_fingerprint, create=create, **options)

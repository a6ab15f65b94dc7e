"""The expert store each command opens, from config: the one place that reads
``experts.store_url`` beside the store directory rule of :mod:`topology.composition.paths`.

- ``experts.store_url`` empty: the store is the directory ``paths.store_dir`` names, the
  same for every command (``--store`` given to a reader must exist);
- ``experts.store_url = "s3://bucket/prefix"``: the store is that bucket; the directory
  (``--store``, ``experts.store_dir``, ``trainer.store_dir``) is this command's local
  cache, by default ``<data_dir>/expert-cache/<role>``, so that commands sharing a
  data directory still share nothing but the bucket.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from topology.composition import paths

if TYPE_CHECKING:
    from topology.composition.worx_config import WorxConfig


def local_dir(config: WorxConfig, role: str, override: paths.PathLike = None) -> Path:
    """The store directory, or with a store URL this command's cache directory."""
    if not config.experts.store_url:
        return paths.store_dir(config, override)
    configured = override or config.experts.store_dir or config.trainer.store_dir
    return Path(configured) if configured else Path(config.data_dir) / "expert-cache" / role


def open_configured_store(
    config: WorxConfig,
    role: str,
    trunk_fingerprint: str | None,
    override: paths.PathLike = None,
    **options: Any,
):
    """Open the store ``config`` names for ``role`` (``trainer``, ``serve``, ``monitor``,
    ``experts``); ``options`` go to :class:`experts.store.ExpertStore` (``create``, the
    LRU budget) over the retention settings of ``[experts]``."""
    from experts.object_store import ObjectStoreError
    from experts.store_open import open_store
    from worx.errors import UserError

    root = local_dir(config, role, override)
    options = {**config.experts.store_options(), **options}
    try:
        return open_store(config.experts.store_url, root, trunk_fingerprint, **options)
    except ObjectStoreError as exc:
        raise UserError(
            str(exc), "set experts.store_url (WORX_EXPERTS__STORE_URL) and the AWS_* variables"
        ) from exc

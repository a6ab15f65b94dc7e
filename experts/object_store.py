"""The expert store in an S3-compatible bucket: ``s3://<bucket>/<prefix>/<expert_id>/...``.

Same layout as the directory store, one object per file. Credentials, region and endpoint
come from the environment as boto3 reads them (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` for MinIO, Ceph or
any other S3-protocol server, or a profile).

* Write-once by conditional puts (``If-None-Match: *``: the server refuses a put onto an
  existing key, so of two writers of one key exactly one succeeds). The weights object goes
  first (its sha256 in its metadata), the manifest last: an entry exists, for readers, once
  its manifest does. A writer that finds the weights key taken with the same sha256 goes on
  to the manifest (a retry of its own job); with another sha256 it is refused while that
  object is younger than ``stale_after_s`` (its writer is still writing) and reclaims it
  after (its writer died between the two puts).
* Reads are lazy through a local cache directory (``<cache>/<expert_id>/weights.safetensors``),
  which the store memory-maps and verifies by sha256 on every load like any other file; a
  cached copy that fails the checks is fetched again, and only bytes fresh from the bucket
  that fail them are refused and quarantined.
* Quarantine is a prefix of the bucket: ``<prefix>/.quarantine/<expert_id>-<ms>-<hex>/``.

Transport failures (unreachable endpoint, throttling, a server error) raise
:class:`ObjectStoreError`, an ``OSError``: like a disk error, they stop a trainer instead of
failing its job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experts.store_files import (
    MANIFEST,
    QUARANTINE,
    REASON,
    WEIGHTS,
    StoreUnavailable,
    WriteConflict,
    now_ms,
)
from experts.store_files import quarantine_name as _quarantine_name

log = logging.getLogger(__name__)

SHA_METADATA = "sha256"  # x-amz-meta-sha256 of a weights object
_MISSING = {"404", "NoSuchKey", "NotFound"}


class ObjectStoreError(StoreUnavailable):
    """The bucket cannot be used (missing, refused, unreachable); the message says how to fix it."""


def parse_store_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix/")`` (prefix may be empty).

    >>> parse_store_url("s3://experts/team-a")
    ('experts', 'team-a/')
    """
    if not url.startswith("s3://"):
        raise ValueError(f"experts.store_url {url!r} is not an s3://bucket/prefix URL")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    if not bucket or any(part in (".", "..") for part in prefix.split("/")) or "//" in prefix:
        raise ValueError(
            f"experts.store_url {url!r} needs a bucket name and a plain prefix: s3://bucket/prefix"
        )
    return bucket, f"{prefix}/" if prefix else ""


class S3Backend:
    """The object backend of :class:`experts.store.ExpertStore` (see the module docstring)."""

    caches = True

    def __init__(
        self, url: str, cache_dir: str | os.PathLike[str], client: Any = None,
        stale_after_s: float = 3600.0,
    ) -> None:  # fmt: skip
        import boto3
        import botocore.exceptions

        self._errors = botocore.exceptions
        self.bucket, self.prefix = parse_store_url(url)
        self.where = f"s3://{self.bucket}/{self.prefix}"
        self.local_root = Path(cache_dir)
        self.stale_after_s = float(stale_after_s)
        self.client = client or boto3.client("s3")
        self._check_bucket()

    # ---- transport ----------------------------------------------------------------------
    def _check_bucket(self) -> None:
        endpoint = self.client.meta.endpoint_url
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except self._errors.ClientError as exc:
            code = _code(exc)
            if code in {"404", "NoSuchBucket", "NotFound"}:
                raise ObjectStoreError(
                    f"bucket {self.bucket!r} does not exist at {endpoint}: create it "
                    f"(`aws s3 mb s3://{self.bucket}`) or fix experts.store_url"
                ) from None
            if code in {"403", "AccessDenied"}:
                raise ObjectStoreError(
                    f"access to bucket {self.bucket!r} at {endpoint} is denied: check "
                    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the profile) and the "
                    "bucket policy"
                ) from None
            raise ObjectStoreError(f"bucket {self.bucket!r} at {endpoint}: {exc}") from None
        except self._errors.NoCredentialsError:
            raise ObjectStoreError(
                f"no credentials for {self.where}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            ) from None
        except self._errors.BotoCoreError as exc:
            raise ObjectStoreError(f"cannot reach {self.where} at {endpoint}: {exc}") from None

    def _call(self, operation: str, **kwargs: Any) -> Any:
        """One client call; a missing key raises FileNotFoundError, transport trouble
        ObjectStoreError; other ClientErrors (412 and the like) are the caller's."""
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **kwargs)
        except self._errors.ClientError as exc:
            if _code(exc) in _MISSING:
                missing = f"{self.where}: {kwargs.get('Key', '')} not found"
                raise FileNotFoundError(missing) from None
            if _status(exc) >= 500 or _code(exc) in {"AccessDenied", "403", "NoSuchBucket"}:
                raise ObjectStoreError(f"{operation} on {self.where} failed: {exc}") from exc
            raise
        except self._errors.BotoCoreError as exc:
            raise ObjectStoreError(f"{operation} on {self.where} failed: {exc}") from exc

    def _keys(self, under: str) -> list[dict]:
        out: list[dict] = []
        token = None
        while True:
            page = self._call(
                "list_objects_v2",
                Prefix=under,
                **({"ContinuationToken": token} if token else {}),
            )
            out += page.get("Contents", [])
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def _key(self, name: str, file: str) -> str:
        return f"{self.prefix}{name}/{file}"

    # ---- the interface ------------------------------------------------------------------
    def exists(self) -> bool:
        return True  # checked on open

    def names(self) -> list[str]:
        """Entries with a manifest (a weights object alone is a write under way)."""
        found = set()
        for item in self._keys(self.prefix):
            parts = item["Key"][len(self.prefix) :].split("/")
            if len(parts) == 2 and parts[1] == MANIFEST and not parts[0].startswith("."):
                found.add(parts[0])
        return sorted(found)

    def has(self, name: str) -> bool:
        try:
            self._call("head_object", Key=self._key(name, MANIFEST))
        except FileNotFoundError:
            return False
        return True

    def read_manifest(self, name: str, limit: int) -> bytes:
        return self._read(self._key(name, MANIFEST), limit)

    def _read(self, key: str, limit: int) -> bytes:
        return b"".join(self._chunks(key, limit))

    def _chunks(self, key: str, limit: int) -> Iterator[bytes]:
        """The first ``limit`` bytes of ``key``, a MiB at a time."""
        try:
            body = self._call("get_object", Key=key, Range=f"bytes=0-{limit - 1}")["Body"]
        except self._errors.ClientError as exc:
            if _code(exc) == "InvalidRange":  # an empty object
                return iter(())
            raise ObjectStoreError(f"reading {key} from {self.where} failed: {exc}") from exc
        return body.iter_chunks(1 << 20)

    def weights_file(self, name: str, size_bytes: int, refresh: bool) -> tuple[Path, bool]:
        """The local copy of ``name``'s weights and whether it was just fetched. At most one
        byte more than the manifest's size is fetched: enough to see that it is too long."""
        path = self.local_root / name / WEIGHTS
        if not refresh and path.is_file():
            return path, False
        chunks = self._chunks(self._key(name, WEIGHTS), size_bytes + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}"
        try:
            with tmp.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            os.replace(tmp, path)  # readers that mapped the old copy keep their mapping
        except self._errors.BotoCoreError as exc:  # the connection broke mid-body
            raise ObjectStoreError(f"fetching {name} from {self.where} failed: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        return path, True

    def write_once(self, name: str, weights: bytes, manifest: bytes, sha256: str) -> bool:
        """Weights, then the manifest, each by a conditional put; False if the manifest was
        there first (the caller compares it). WriteConflict: the weights key is taken with
        other bytes by a writer that may still be writing."""
        weights_key = self._key(name, WEIGHTS)
        for attempt in range(2):
            if self._put_once(weights_key, weights, {SHA_METADATA: sha256}):
                break
            head = self._head(weights_key)
            if head is None:
                continue  # removed (reclaimed, quarantined) between the put and the look
            if head["Metadata"].get(SHA_METADATA) == sha256:
                break  # the same bytes: a retry of this write, or a twin
            if self.has(name):
                return False
            age_s = time.time() - head["LastModified"].timestamp()
            if age_s < self.stale_after_s or attempt:
                raise WriteConflict(
                    f"{weights_key} is being written with other bytes (sha256 "
                    f"{head['Metadata'].get(SHA_METADATA, '?')[:12]}..., {age_s:.0f} s ago) "
                    "by another writer"
                )
            log.warning("reclaiming %s: written %.0f s ago, never committed", weights_key, age_s)
            self._delete(weights_key, head["ETag"])
        return self._put_once(self._key(name, MANIFEST), manifest, {})

    def _put_once(self, key: str, body: bytes, metadata: dict[str, str]) -> bool:
        try:
            self._call("put_object", Key=key, Body=body, Metadata=metadata, IfNoneMatch="*")
        except self._errors.ClientError as exc:
            if _code(exc) in {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}:
                return False
            raise ObjectStoreError(f"writing {key} to {self.where} failed: {exc}") from exc
        return True

    def _head(self, key: str) -> dict | None:
        try:
            return self._call("head_object", Key=key)
        except FileNotFoundError:
            return None

    def _delete(self, key: str, etag: str | None = None) -> None:
        try:
            self._call("delete_object", Key=key, **({"IfMatch": etag} if etag else {}))
        except self._errors.ClientError as exc:
            if _code(exc) not in {"PreconditionFailed", "412"}:  # changed since: leave it
                raise ObjectStoreError(f"deleting {key} from {self.where} failed: {exc}") from exc
        except FileNotFoundError:
            pass

    def quarantine(self, name: str) -> str | None:
        """Copy every object of the entry under the quarantine prefix, then delete it; None
        if it is gone (another process moved it first)."""
        objects = self._keys(f"{self.prefix}{name}/")
        if not objects:
            return None
        dest = f"{self.prefix}{QUARANTINE}/{_quarantine_name(name)}/"
        for item in objects:
            key = item["Key"]
            try:
                self._call(
                    "copy_object",
                    Key=dest + key[len(f"{self.prefix}{name}/") :],
                    CopySource={"Bucket": self.bucket, "Key": key},
                )
            except FileNotFoundError:
                continue
        for item in objects:
            self._delete(item["Key"])
        shutil.rmtree(self.local_root / name, ignore_errors=True)
        return f"s3://{self.bucket}/{dest}"

    def write_reason(self, where: Path | str, reason: dict) -> None:
        key = str(where)[len(f"s3://{self.bucket}/") :] + REASON
        self._call("put_object", Key=key, Body=json.dumps(reason, sort_keys=True).encode())

    def _quarantine_entries(self) -> dict[str, list[dict]]:
        entries: dict[str, list[dict]] = {}
        root = f"{self.prefix}{QUARANTINE}/"
        for item in self._keys(root):
            entries.setdefault(item["Key"][len(root) :].split("/")[0], []).append(item)
        return entries

    def _reason(self, entry: str, items: list[dict]) -> dict:
        key = f"{self.prefix}{QUARANTINE}/{entry}/{REASON}"
        try:
            return json.loads(self._read(key, 1 << 20))
        except (FileNotFoundError, ObjectStoreError, ValueError):
            stamp = max(i["LastModified"].timestamp() for i in items) * 1000
            return {
                "expert_id": entry, "reason": "unknown", "detail": "no reason.json",
                "quarantined_ms": stamp,
            }  # fmt: skip

    def quarantined(self) -> list[dict]:
        return [self._reason(e, items) for e, items in sorted(self._quarantine_entries().items())]

    def prune_quarantine(self, keep: int, max_age_s: float) -> None:
        entries = self._quarantine_entries()
        if not entries or (max_age_s <= 0 and (keep <= 0 or len(entries) <= keep)):
            return
        # when each entry was moved: its newest object (reason.json is written last)
        stamps = {
            e: max(i["LastModified"].timestamp() for i in items) * 1000
            for e, items in entries.items()
        }
        stamped = sorted(((stamp, e) for e, stamp in stamps.items()), reverse=True)
        now = now_ms()
        for index, (stamp, entry) in enumerate(stamped):
            if (keep > 0 and index >= keep) or (max_age_s > 0 and now - stamp > max_age_s * 1000):
                for item in entries[entry]:
                    self._delete(item["Key"])
                log.info("quarantine retention removed %s", entry)

    def housekeeping(self, stale_after_s: float) -> None:
        """Remove weights objects never committed by a manifest within ``stale_after_s``."""
        items = self._keys(self.prefix)
        keys = {i["Key"] for i in items}
        for item in items:
            parts = item["Key"][len(self.prefix) :].split("/")
            if len(parts) != 2 or parts[1] != WEIGHTS or parts[0].startswith("."):
                continue
            if self._key(parts[0], MANIFEST) in keys:
                continue
            if time.time() - item["LastModified"].timestamp() > stale_after_s:
                log.warning("removing %s: written, never committed by a manifest", item["Key"])
                self._delete(item["Key"], item.get("ETag"))


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)

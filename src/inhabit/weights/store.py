"""The weight store: versions as shard files plus a manifest, on a local disk or any fsspec URL.

Layout under the root (a directory, `memory://name`, `s3://bucket/prefix`, `http://host:port`):

    v000000000007/shard-00000.bin ...   encoded tensors, packed back to back
    v000000000007/manifest.json         written last: the version exists once this exists
    LATEST                              newest committed version (written after its manifest)
    leases/<subscriber>.json            version a subscriber holds or is fetching, with expiry

Atomicity: shards first, then the manifest, which on a local disk goes through a temporary name
and a rename (atomic on POSIX) and on object stores is a single PUT (atomic per object). So a
publisher killed at any moment leaves either a complete version or none that readers can see;
the leftovers of a dead publish are removed by `gc`. One publisher per store is assumed.

Retention (`gc`): versions form chains (a full snapshot and the deltas after it, up to the next
snapshot). The newest `keep_chains` chains are kept, and so is every chain that holds a version
some subscriber has leased (leases expire, so a dead subscriber cannot pin storage forever).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from inhabit.errors import WeightsError
from inhabit.log import get_logger
from inhabit.weights.manifest import Manifest

log = get_logger(__name__)

_VERSION_DIR = re.compile(r"^v(\d{12})$")
MANIFEST = "manifest.json"


class VersionNotFound(WeightsError):
    """The requested version is not (or no longer) in the store."""


class StoreUnreachable(WeightsError):
    """The store's filesystem does not answer (network down, wrong host or port)."""

    exit_code = 1


@dataclass(frozen=True)
class Lease:
    """A subscriber's claim on a version (protects its chain from garbage collection)."""

    name: str
    version: int
    expires: float


class Store:
    """A version store on one fsspec filesystem (see module docstring)."""

    def __init__(self, url: str, *, fs: Any = None, storage_options: dict[str, Any] | None = None) -> None:
        if fs is None:
            fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
        else:
            root = str(url)
        self.url = str(url)
        self.fs = fs
        self.root = root.rstrip("/") if root not in ("/", "") else root
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.is_local = protocol in ("file", "local")
        # fsspec's http filesystem (`inhabit weights serve`) only reads: no leases, no publishing.
        self.read_only = protocol in ("http", "https")

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # ------------------------------------------------------------------ paths

    def _join(self, *parts: str) -> str:
        return "/".join([self.root, *parts]) if self.root else "/".join(parts)

    def version_dir(self, version: int) -> str:
        return self._join(f"v{version:012d}")

    def manifest_path(self, version: int) -> str:
        return self._join(f"v{version:012d}", MANIFEST)

    def shard_path(self, version: int, file: str) -> str:
        return self._join(f"v{version:012d}", file)

    # ------------------------------------------------------------------ reading

    def versions(self) -> list[int]:
        """Committed versions (those with a manifest), ascending."""
        return sorted(v for v, committed in self._version_dirs() if committed)

    def _version_dirs(self) -> Iterator[tuple[int, bool]]:
        """(version, has manifest) for every version directory, committed or not."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return
        for entry in entries:
            m = _VERSION_DIR.match(str(entry).rstrip("/").rsplit("/", 1)[-1])
            if m:
                v = int(m.group(1))
                yield v, self.fs.exists(self.manifest_path(v))

    def latest(self) -> int | None:
        """Newest committed version: the LATEST pointer, else a listing (None if the store is empty)."""
        try:
            text = self.fs.cat_file(self._join("LATEST")).decode().strip()
            return int(text)
        except (FileNotFoundError, ValueError):
            versions = self.versions()
            return versions[-1] if versions else None

    def manifest(self, version: int) -> Manifest:
        """The verified manifest of a committed version (VersionNotFound, ChecksumMismatch)."""
        path = self.manifest_path(version)
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            raise VersionNotFound(f"version {version} is not in {self.url}") from None
        manifest = Manifest.from_json(data, where=path)
        if manifest.version != version:
            raise WeightsError(f"{path} describes version {manifest.version}, not {version}")
        return manifest

    def read_shard(self, version: int, file: str) -> bytes:
        try:
            return self.fs.cat_file(self.shard_path(version, file))
        except FileNotFoundError:
            raise VersionNotFound(f"shard {file} of version {version} is missing from {self.url}") from None

    # ------------------------------------------------------------------ writing

    def _put(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers see the old state or the new one, never a part."""
        if self.is_local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self.fs.open(tmp, "wb") as f:
                f.write(data)
            self.fs.mv(tmp, path)
        else:
            self.fs.pipe_file(path, data)

    def begin(self, version: int) -> None:
        """Prepare to write `version`: it must be new; leftovers of a dead publish are removed."""
        if self.fs.exists(self.manifest_path(version)):
            raise WeightsError(f"version {version} is already published in {self.url}; versions only grow")
        if self.fs.exists(self.version_dir(version)):
            self.fs.rm(self.version_dir(version), recursive=True)

    def write_shard(self, version: int, file: str, data: bytes) -> None:
        self._put(self.shard_path(version, file), data)

    def commit(self, manifest: Manifest) -> None:
        """Make a version visible: manifest last (atomic), then the LATEST pointer."""
        self._put(self.manifest_path(manifest.version), manifest.to_json())
        self._put(self._join("LATEST"), f"{manifest.version}\n".encode())

    def delete(self, version: int) -> None:
        """Remove a version: the manifest first, so it is never visible half-deleted."""
        try:
            self.fs.rm(self.manifest_path(version))
        except FileNotFoundError:
            pass
        if self.fs.exists(self.version_dir(version)):
            self.fs.rm(self.version_dir(version), recursive=True)

    # ------------------------------------------------------------------ leases and retention

    def lease(self, name: str, version: int, ttl_s: float = 3600.0) -> None:
        """Record that subscriber `name` needs `version` for the next `ttl_s` seconds."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise WeightsError(f"subscriber name {name!r} may use only letters, digits, '_', '.', '-'")
        body = {"name": name, "version": int(version), "expires": time.time() + ttl_s}
        self._put(self._join("leases", f"{name}.json"), json.dumps(body).encode())

    def release(self, name: str) -> None:
        try:
            self.fs.rm(self._join("leases", f"{name}.json"))
        except FileNotFoundError:
            pass

    def leases(self, now: float | None = None) -> list[Lease]:
        """Live leases (expired ones are ignored)."""
        now = time.time() if now is None else now
        try:
            files = self.fs.ls(self._join("leases"), detail=False)
        except FileNotFoundError:
            return []
        out = []
        for path in files:
            try:
                body = json.loads(self.fs.cat_file(path))
                lease = Lease(str(body["name"]), int(body["version"]), float(body["expires"]))
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                continue
            if lease.expires > now:
                out.append(lease)
        return out

    def chains(self) -> list[list[Manifest]]:
        """Committed versions grouped into chains, oldest first."""
        chains: dict[int, list[Manifest]] = {}
        for v in self.versions():
            try:
                m = self.manifest(v)
            except WeightsError as e:
                log.warning("skipping version %d while grouping chains: %s", v, e)
                continue
            chains.setdefault(m.chain, []).append(m)
        return [chains[c] for c in sorted(chains)]

    def gc(self, keep_chains: int = 2) -> list[int]:
        """Delete old chains nobody needs and leftovers of dead publishes; return deleted versions."""
        if keep_chains < 1:
            raise WeightsError("gc must keep at least one chain (the newest)")
        chains = self.chains()
        leased = {lease.version for lease in self.leases()}
        deleted: list[int] = []
        for chain in chains[:-keep_chains]:
            members = {m.version for m in chain}
            if members & leased:
                continue
            for m in reversed(chain):  # newest first: the chain stays replayable while it shrinks
                self.delete(m.version)
                deleted.append(m.version)
        latest = self.latest()
        for v, committed in list(self._version_dirs()):
            if not committed and latest is not None and v < latest:
                self.delete(v)  # a publish that died before its manifest; a newer one has landed
                deleted.append(v)
        if deleted:
            log.info("gc removed versions %s from %s", sorted(deleted), self.url)
        return sorted(deleted)

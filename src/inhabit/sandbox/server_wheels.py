"""Wheelhouses uploaded to the environment server: a client's wheels, kept content-addressed.

An environment server builds a client's environment from its lock (`POST /v1/environments`);
on a server without a registry, or for packages the registry does not have, the client first
uploads the wheels (`POST /v1/wheelhouses`, a tar of .whl files, plain or compressed) and names
the returned id with the lock. The server stores them at `<root>/<sha256 hex>/`, the digest of
the sorted (file name, file digest) pairs, so the same wheels uploaded twice are one folder, and
installs from that folder with `--offline` (as `--wheelhouse DIR` does locally).

What is checked: every member is a regular file whose base name is a wheel file name (letters,
digits and `._+!-`, ending in .whl, no path kept), its bytes are a zip archive, the body is capped
while it streams in, the unpacked bytes and the member count are capped as they are read, and a
folder is renamed into place only when complete. Wheels are only ever installed, never run at
install time (a wheel has no build step), and the lock's hashes still decide what is installed:
an uploaded wheel that does not match the lock fails the build. NOT protected against: a client
holding the token filling the disk with distinct wheelhouses up to the cap each (no quota).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import tarfile
import zipfile
from pathlib import Path

from inhabit.errors import SandboxLimitExceeded, SandboxNotFound
from inhabit.sandbox.server_upload import BadUpload

__all__ = ["WheelhouseNotFound", "store_wheelhouse", "wheelhouse_path"]

# A wheel file name (PEP 427: name-version[-build]-python-abi-platform.whl), as a base name only.
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+!]*(-[A-Za-z0-9_.+!]+){4,5}\.whl$")
_ID = re.compile(r"^sha256:([0-9a-f]{64})$")


class WheelhouseNotFound(SandboxNotFound):
    """An environment named a wheelhouse id this server does not hold."""


def wheelhouse_path(root: Path, wheelhouse_id: str) -> Path:
    """The stored wheelhouse `wheelhouse_id` under `root`; WheelhouseNotFound when missing."""
    m = _ID.match(wheelhouse_id)
    path = root / m.group(1) if m else None
    if path is None or not path.is_dir():
        raise WheelhouseNotFound(
            f"this server has no wheelhouse {wheelhouse_id}: POST the wheels to /wheelhouses first"
        )
    return path


def store_wheelhouse(archive: Path, root: Path, *, max_bytes: int, max_files: int) -> tuple[str, list[str]]:
    """Unpack the wheels of the tar `archive` and store them under `root`; returns the
    wheelhouse id and the wheel file names. BadUpload / SandboxLimitExceeded say what is wrong."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".receiving-{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        names = _unpack(archive, tmp, max_bytes=max_bytes, max_files=max_files)
        if not names:
            raise BadUpload("the uploaded wheelhouse holds no .whl file")
        listing = "".join(
            f"{name}\0{hashlib.sha256((tmp / name).read_bytes()).hexdigest()}\n" for name in names
        )
        digest = hashlib.sha256(listing.encode()).hexdigest()
        final = root / digest
        if final.is_dir():
            return f"sha256:{digest}", names  # the same wheels were uploaded before
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():  # not a concurrent upload of the same wheels: a real failure
                raise
        return f"sha256:{digest}", names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(archive: Path, dest: Path, *, max_bytes: int, max_files: int) -> list[str]:
    total, names = 0, []
    try:
        with tarfile.open(archive, mode="r|*") as tar:  # stream mode: see server_upload
            for member in tar:
                if member.isdir():
                    continue
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not _WHEEL_NAME.match(name):
                    raise BadUpload(
                        f"the uploaded wheelhouse holds {member.name!r}, which is not a wheel file "
                        "(only regular files named like name-version-python-abi-platform.whl)"
                    )
                if name in names:
                    raise BadUpload(f"the uploaded wheelhouse holds {name!r} twice")
                total += member.size
                if len(names) >= max_files or total > max_bytes:
                    raise SandboxLimitExceeded(
                        f"the uploaded wheelhouse holds more than {max_files} files or {max_bytes} "
                        "bytes; upload only the wheels the lock needs or raise the server's "
                        "--max-wheelhouse-mb"
                    )
                src = tar.extractfile(member)
                assert src is not None  # a regular file always has data
                with src, (dest / name).open("wb") as out:
                    shutil.copyfileobj(src, out)
                if not zipfile.is_zipfile(dest / name):
                    raise BadUpload(f"the uploaded {name!r} is not a wheel (not a zip archive)")
                names.append(name)
    except (tarfile.TarError, EOFError, OSError) as e:  # gzip.BadGzipFile is an OSError
        raise BadUpload(f"the wheelhouse upload could not be unpacked as a tar archive: {e}") from e
    return sorted(names)

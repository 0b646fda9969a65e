"""Wheels written from files: a package made on the spot, or one repacked from inhabit's own install.

Every task environment needs pytest (grading's seal plugin runs inside it). When a project's
requirements do not name pytest, the lock adds it, and the resolver may take it from the wheels
`own_wheelhouse` repacks out of the installation that runs inhabit: pytest and the packages it
requires, byte-for-byte the files installed here. So an offline machine can build environments
with nothing but the project's own wheelhouse, and the pytest of every environment is one this
machine already trusts. The repacked archives are deterministic (sorted members, fixed times), so
a lock's hashes of them hold on every machine with the same installed versions.

`write_wheel` makes a pure-Python wheel from a mapping of files (the tests' third-party fixture
package; nothing else needs it).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["own_wheelhouse", "write_wheel"]

_EPOCH = (1980, 1, 1, 0, 0, 0)
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _write(path: Path, files: Mapping[str, bytes], dist_info: str) -> Path:
    files = dict(files)
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in sorted(files.items())]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    tmp.replace(path)
    return path


def write_wheel(
    dest: str | Path, name: str, version: str, files: Mapping[str, str | bytes], requires: Iterable[str] = ()
) -> Path:
    """A `py3-none-any` wheel of `files` (paths inside site-packages) in the folder `dest`."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{_normal(name)}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    content = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    content[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    content[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: inhabit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    return _write(dest / f"{_normal(name)}-{version}-py3-none-any.whl", content, dist_info)


def _requires(dist: md.Distribution) -> list[str]:
    """Names of the distributions `dist` requires on this interpreter (extras left out)."""
    out = []
    for req in dist.requires or []:
        text, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        if marker.strip() and not _marker_holds(marker):
            continue
        m = _REQ_NAME.match(text)
        if m:
            out.append(m.group(1))
    return out


def _marker_holds(marker: str) -> bool:
    try:
        from packaging.markers import Marker

        return bool(Marker(marker).evaluate())
    except Exception:  # no packaging, or a marker it cannot read: include the requirement
        return True


def own_wheelhouse(dest: str | Path, names: Iterable[str] = ("pytest",)) -> Path:
    """Repack the installed distributions `names` and everything they require into wheels in `dest`.

    Only pure-Python distributions are repacked (a compiled one has no portable tag to give);
    a name that is not installed is skipped. Returns `dest`."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if _normal(name) in seen:
            continue
        seen.add(_normal(name))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        todo += _requires(dist)
        wheel = dest / f"{_normal(dist.metadata['Name'])}-{dist.version}-py3-none-any.whl"
        if wheel.exists():
            continue
        files: dict[str, bytes] = {}
        dist_info = ""
        pure = True
        for f in dist.files or []:
            rel = str(f)
            if (
                rel.startswith("..")
                or "__pycache__" in rel
                or rel.endswith((".pyc", "/RECORD", "/INSTALLER"))
            ):
                continue  # console scripts (../../bin) are made again by the installer
            if rel.endswith((".so", ".pyd")):
                pure = False
                break
            if rel.endswith("direct_url.json") or rel.endswith("REQUESTED"):
                continue
            path = Path(str(f.locate()))
            if path.is_file():
                files[rel] = path.read_bytes()
                if rel.split("/", 1)[0].endswith(".dist-info"):  # its own, not one it vendors
                    dist_info = rel.split("/", 1)[0]
        if pure and dist_info:
            files[f"{dist_info}/WHEEL"] = (
                b"Wheel-Version: 1.0\nGenerator: inhabit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            _write(wheel, files, dist_info)
    return dest

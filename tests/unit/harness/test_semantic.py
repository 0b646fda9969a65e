"""semantic_search with the real bundled MiniLM model (offline): ranking, ranges, index caching."""

from __future__ import annotations

from inhabit.harness.tools import TOOLS, ToolContext, bind_args, semantic


async def test_semantic_search_ranks_the_relevant_chunk_and_caches(ctx: ToolContext) -> None:
    await ctx.sandbox.write_file(
        "net/http_client.py",
        "import socket\n\n\ndef fetch_url(url):\n    '''Download a web page over HTTP and return its body.'''\n"
        "    sock = socket.create_connection((url, 80))\n    return sock.recv(4096)\n",
    )
    await ctx.sandbox.write_file(
        "colors.py",
        "def mix_colors(a, b):\n    '''Blend two RGB colours.'''\n    return tuple((x + y) // 2 for x, y in zip(a, b))\n",
    )
    tool = TOOLS["semantic_search"]
    obs = await tool.run(ctx, bind_args(tool.spec, {"query": "download a web page", "top_k": "2"}))
    first = obs.text.splitlines()[0]
    assert first.startswith("net/http_client.py:1-7") and "score=" in first
    assert len([ln for ln in obs.text.splitlines() if "score=" in ln]) == 2

    index = await semantic.build_index(ctx)
    assert await semantic.build_index(ctx) is index  # unchanged workspace: the same cached index
    before = len(semantic._CHUNK_VECTORS)
    await ctx.sandbox.write_file("colors.py", "def mix_colours(a, b):\n    return a\n")
    changed = await semantic.build_index(ctx)
    assert changed is not index
    assert len(semantic._CHUNK_VECTORS) == before + 1  # only the edited file's chunk was embedded

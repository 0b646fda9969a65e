"""The harness's ten tools (docs/architecture.md): names, arguments and what each does are a contract.

`TOOLS` maps each name to its one instance; `bind_args` checks a parsed call against its spec.
"""

from __future__ import annotations

from inhabit.harness.tools.base import Observation, Tool, ToolContext, ToolError, ToolSpec, bind_args
from inhabit.harness.tools.files import EditFile, ListDir, ReadFile, WriteFile
from inhabit.harness.tools.finish import Finish
from inhabit.harness.tools.semantic import SemanticSearch
from inhabit.harness.tools.shell import Grep, Lint, Run
from inhabit.harness.tools.tests import RunTests

_ALL: tuple[Tool, ...] = (
    ReadFile(),
    WriteFile(),
    EditFile(),
    ListDir(),
    Grep(),
    SemanticSearch(),
    Lint(),
    Run(),
    RunTests(),
    Finish(),
)
TOOLS: dict[str, Tool] = {t.spec.name: t for t in _ALL}

__all__ = ["TOOLS", "Observation", "Tool", "ToolContext", "ToolError", "ToolSpec", "bind_args"]

"""The quickstart task family, where the quickstart's code has always imported it from.

The generator lives in `inhabit.tasks.families.quickstart` so that `inhabit tasks generate
--family quickstart` (a command of the tasks part, which may not import the orchestrator) can
reuse it; this module keeps the orchestrator's names.
"""

from inhabit.tasks.families.quickstart import (
    ARGS,
    CASES,
    FUNCTIONS,
    MODULES,
    OPS,
    QUICKSTART_COMMAND,
    VERBS,
    Fn,
    QuickTask,
    apply,
    generate,
    make_task,
    split_tasks,
    write_quick_task,
)

__all__ = [
    "ARGS",
    "CASES",
    "FUNCTIONS",
    "MODULES",
    "OPS",
    "QUICKSTART_COMMAND",
    "VERBS",
    "Fn",
    "QuickTask",
    "apply",
    "generate",
    "make_task",
    "split_tasks",
    "write_quick_task",
]

"""inhabit.tasks: the task format (docs/architecture.md, "Task directory") and the `inhabit task` commands.

- `task`: `load_task(path) -> Task`, `GradingSpec`, `TaskFormatError`
- `build`: write task directories from Python (`write_task`, the calculator task)

Generating tasks (builders, importers, families and their experts) lives in `inhabit.taskgen`;
running their tests, grading and `check_task` (behind `inhabit tasks check`: is a task valid
and gradable?) in `inhabit.grading`.
"""

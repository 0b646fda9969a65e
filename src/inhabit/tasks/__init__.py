"""inhabit.tasks: task directories (docs/architecture.md, "Task directory") and running their tests.

- `task`: `load_task(path) -> Task`, `GradingSpec`, `TaskFormatError`
- `testrun`: `run_tests(sandbox, command, ...) -> TestRunResult` (sealed JUnit XML, per-test outcomes)
- `junit`: JUnit XML -> pytest node ids; `seal_plugin`: the pytest plugin copied into sandboxes
- `check`: `check_task` behind `inhabit task check`; `build`: write task directories from Python
"""

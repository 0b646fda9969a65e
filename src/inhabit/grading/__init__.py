"""inhabit.grading: everything between a final workspace and a verdict (docs/grading.md).

- `grader`: `grade(task, final_sandbox, provider) -> GradeResult`, `GradingConfig`
- `testrun`: `run_tests(sandbox, command, ...) -> TestRunResult` (sealed JUnit XML, per-test outcomes)
- `junit`: JUnit XML -> pytest node ids; `seal_plugin`: the pytest plugin copied into sandboxes
- `canaries`: planted checks that a graded run really ran the tests it reports
- `hacks`: neutralization before the run, the flag names (listed in its docstring), the code scan
- `infra`: what counts as a test, pytest configuration, a start-up hook, a shadowing module
- `gradecache`: one grade per distinct final workspace within a group
- `check`: `check_task` behind `inhabit tasks check` (is a task valid and gradable?)
- `diagnose`: why a test suite cannot run at all, said once
"""

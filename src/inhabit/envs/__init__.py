"""Per-project test environments: resolved from what a project declares, locked, built once.

- `requirements`: the test requirements a project declares (pyproject, extras, groups, files, tox);
- `lock`: `uv pip compile` them to exact pins with hashes; the environment id (python + lock);
- `store`: the content-addressed, read-only store of built environments (atomic, one per id);
- `task_env`: the environment of a task directory's `[environment]` table, built when missing;
- `wheels`: wheels written from files (inhabit's own pytest for offline machines, test fixtures).
Sandboxes mount an environment read-only at the machine profile's `env_dir` (docs/environments.md).
"""

"""inhabit.taskgen: making tasks, apart from the task format it writes (`inhabit.tasks`).

- `builder`, `mutate`, `covmap`, `source`: tasks built from a real project by mutating its code
- `humaneval`, `swebench`: importers of public benchmarks
- `families`: generated task families (quickstart, multistep) and their scripted experts
- `cli`: `inhabit tasks build|import-humaneval|import-swebench|generate`
"""

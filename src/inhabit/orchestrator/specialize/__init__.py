"""`inhabit specialize REPO --model MODEL`: from a repository and an open model to a model that is
measured on that repository's held-out modules, in one command.

    config.py   SpecializeConfig (the knobs that matter, TOML + overrides) and the budget's split
    split.py    train / held-out by module: every mutant of one source file on the same side
    stats.py    success rates, Wilson intervals, the paired bootstrap interval on the difference
    state.py    the resumable state file of a run folder
    display.py  the one progress display over the steps
    steps.py    the steps: tasks, baseline, format bootstrap, RL, gate, report
    report.py   the report (report.json + the terminal summary + the serve / agent commands)
    cli.py      the command
"""

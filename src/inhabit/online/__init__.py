"""inhabit.online: real `inhabit agent` and `inhabit serve` sessions become training data.

    store.py      the session store (SQLite in WAL mode): sessions, signals, the cycle ledger
    redact.py     secrets removed before anything is stored
    rewards.py    signals -> one reward per session (a config table)
    config.py     opt-in per repository (.inhabit/online.toml) and the loop's configuration
    train.py      single-episode policy gradient with a baseline, IS weights, KL anchor
    cycle.py      harvest -> train -> gate -> publish -> watch, resumable after a crash
    recorder.py   `inhabit serve` requests with an X-Inhabit-Session header become sessions
    cli.py        `inhabit online feedback`, `inhabit online init|run|log|outcomes`

See docs/online.md.
"""

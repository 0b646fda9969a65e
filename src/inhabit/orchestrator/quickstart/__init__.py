"""The quickstart's own pieces: a task family, a scripted expert and the bootstrap (mid-training).

`inhabit train configs/quickstart.toml` uses them to go from nothing to a small model that RL can
improve on a CPU: tasks.py writes the tasks, expert.py plays them through the real harness,
bootstrap.py trains a tiny model from random init on those transcripts.
"""

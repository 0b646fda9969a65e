"""The quickstart's own training pieces: the bootstrap (mid-training) and the data it imitates.

`inhabit train configs/quickstart.toml` goes from nothing to a small model that RL can improve on a
CPU: the task family (`inhabit.taskgen.families.quickstart`) writes the tasks, its scripted expert
(`inhabit.taskgen.families.quickstart_expert`) plays them through the real harness, bootstrap.py
trains a tiny model from random init on those transcripts (copydrill.py and renaming.py add to
its data).
"""

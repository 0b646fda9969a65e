"""Midtraining: continued next-token training of a model on a code corpus built on this machine,
with held-out perplexity, exact resume and a servable model folder at the end (`inhabit midtrain`,
docs/training.md)."""

"""Tests of inhabit.weights."""

"""Diagnose: pure functions that turn a window of samples into findings with evidence."""

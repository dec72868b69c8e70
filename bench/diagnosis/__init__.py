"""The diagnosis benchmark: a labelled corpus of jobs judged by the engine, scored per finding kind.

`python -m bench.diagnosis` prints the scores; `corpus` reads and judges the scenarios, `generate`
writes them.
"""

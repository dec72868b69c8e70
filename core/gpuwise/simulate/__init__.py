"""Trace-driven simulation of gpuwise's planners (``gpuwise simulate``).

- :mod:`~gpuwise.simulate.cluster_trace` reads the Alibaba GPU cluster trace format;
- :mod:`~gpuwise.simulate.arrivals` builds the arrival order of the ATC'23 evaluation;
- :mod:`~gpuwise.simulate.replay` places the pods and records the allocation curve;
- :mod:`~gpuwise.simulate.experiment` runs seeds and summarizes them;
- :mod:`~gpuwise.simulate.report` and :mod:`~gpuwise.simulate.simulate_command` are the command line.
"""

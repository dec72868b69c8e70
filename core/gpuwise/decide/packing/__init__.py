"""Placing (fractional-)GPU pods on nodes: feasibility, fragmentation, policies and repacking.

- :mod:`~gpuwise.decide.packing.cluster` — nodes and pod requests as numpy arrays;
- :mod:`~gpuwise.decide.packing.state` — what is free where, and which pod holds what;
- :mod:`~gpuwise.decide.packing.fit` — where a pod fits, and its candidate placements;
- :mod:`~gpuwise.decide.packing.fragmentation` — FGD's and gpuwise's fragmentation measures;
- :mod:`~gpuwise.decide.packing.policies` — random, best fit and FGD, as published;
- :mod:`~gpuwise.decide.packing.gpuwise_policy` — gpuwise's own policy;
- :mod:`~gpuwise.decide.packing.rehearsal` — which of two policies fills a cluster better, tried on its own mix;
- :mod:`~gpuwise.decide.packing.repack` — admitting a pod by migrating a few others;
- :mod:`~gpuwise.decide.packing.registry` — policies by name.
"""

"""The operator: kopf handlers that reconcile each TrainingJob and evaluate it every cycle.

`handlers` wires kopf; `reconcile` renders the `workload` (Job, Service, the `inject`ed sidecar)
and writes `status`; `evaluate` runs each cycle's diagnosis from `gpuwise.prometheus` and hands
Enforce jobs to `gpuwise.act`. The top of the import layers: nothing imports it.
"""

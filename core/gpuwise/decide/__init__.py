"""The *decide* stage of gpuwise's loop: observe → diagnose → **decide** → act.

Planners here are pure functions of a snapshot (no Kubernetes client, no clock, no I/O), so the
operator can call them inside a handler and the simulator can replay a whole production trace
through exactly the same code:

- :mod:`gpuwise.decide.mig_geometry` — MIG geometry: which GPU instances to carve on a GPU or a node
  (profile tables in :mod:`gpuwise.hardware.mig_profiles`).
- :mod:`gpuwise.decide.packing` — where to place a (fractional-)GPU pod, and which running pods
  to migrate when nothing fits.
"""

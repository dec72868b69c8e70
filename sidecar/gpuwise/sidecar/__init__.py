"""The gpuwise telemetry sidecar: GPU samples and training steps, exposed for Prometheus.

Runs next to every training pod, so it imports little: prometheus-client, and pynvml only for
the NVML backend. Never kopf, the Kubernetes client, pydantic, numpy or torch.
"""

"""Talking to Kubernetes: the API client, and what both the operator and the actions read or write.

Below `gpuwise.act` and `gpuwise.operator`, which both use it: the client (`client`), the overrides
annotation an action writes and the reconciler renders (`job_overrides`), a TrainingJob object's
checked spec and the Job fields that follow it (`trainingjob`), and what pods ask for
(`resources`). Helpers only one of them needs live with it.
"""

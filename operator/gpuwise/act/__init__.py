"""Act: each action a small state machine, run within guardrails and a checkpoint handshake.

`runner` takes an Enforce job's recommendations through `guardrails` and the `checkpoint`
handshake into one of the action kinds (`kinds`: `adjust_config`, `reschedule`,
`mig_repartition`, `pack`), each a `machine.ActionKind`; `measure` compares throughput before
and after, `nodes` idles a node's GPUs for the node-side kinds. It talks to Kubernetes through
`gpuwise.kube` and never imports the operator that drives it.
"""

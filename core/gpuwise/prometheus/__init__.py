"""Reading Prometheus: every running job's window in a fixed number of queries per cycle.

The operator's half of *observe*. `batched` asks the queries (built from the metric catalog,
`gpuwise.metrics.promql`) and makes a `snapshot` of every job's series and one `Reported` record
a job; after its first round a read asks only for what is new (`incremental`). Below it:
`client` (the HTTP API), `answers` (range and instant answers decoded with a few objects per
series), `labels` (a label set decoded once) and `heap` (the garbage collector kept off what a
read leaves alive). What the records mean is `gpuwise.diagnose`'s: this package only fills them.
"""

"""`gpuwise run`: a training command, instrumented, with an embedded sidecar and a report."""

"""`python -m gpuwise.observability`: see gpuwise.observability.main."""

from __future__ import annotations

import sys

from gpuwise.observability.main import main

sys.exit(main())

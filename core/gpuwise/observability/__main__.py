"""`python -m gpuwise.observability`: see gpuwise.observability.generate_command."""

from __future__ import annotations

import sys

from gpuwise.observability.generate_command import main

sys.exit(main())

"""The fault suite runs the real components: the fixtures of the integration and action tests."""

from tests.act.conftest import events, kube  # noqa: F401 - the Kube facade and the Events it posts
from tests.integration.conftest import cluster, emulator, operator, operator_args  # noqa: F401

from __future__ import annotations

import pathlib

import pytest

from gpuwise.kube.pod_security import Level
from gpuwise.operator.config import SettingsError, load_settings


def test_file_and_flags(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("sidecar:\n  image: registry.local/gpuwise:2\nresyncSeconds: 30\n")
    settings = load_settings(path, {"resyncSeconds": 5, "namespaces": None})
    assert settings.sidecar.image == "registry.local/gpuwise:2"
    assert settings.resync_seconds == 5


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sidecar:\n  imagePullPolicy: Sometimes\n", "sidecar.imagePullPolicy: Input should be 'Always'"),
        ("resyncSeconds: -1\n", "resyncSeconds: Input should be greater than 0"),
        ("sidecarr: {}\n", "sidecarr: Extra inputs are not permitted"),
        ("podSecurity: Restricted\n", "podSecurity: Input should be 'privileged', 'baseline' or 'restricted'"),
        ("- a list\n", "must hold a mapping, not list"),
        ("key: [unclosed\n", "cannot read settings file"),
    ],
)
def test_bad_settings_say_what_to_fix(tmp_path: pathlib.Path, text: str, says: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=says.replace("[", r"\[").replace("(", r"\(")):
        load_settings(path)


def test_pod_security_is_restricted_unless_the_settings_loosen_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("podSecurity: baseline\n")
    assert load_settings(None).pod_security is Level.RESTRICTED
    assert load_settings(path).pod_security is Level.BASELINE

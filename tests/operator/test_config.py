from __future__ import annotations

import pathlib

import pytest

from gpuwise.kube.pod_security import Level
from gpuwise.operator.config import LiveSettings, SettingsError, load_settings


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


class ConfigMapVolume:
    """A settings file mounted from a ConfigMap: the kubelet writes each version into a new
    directory and swaps the `..data` link to it, so the file's path never changes."""

    def __init__(self, root: pathlib.Path, text: str) -> None:
        self.root = root
        self.versions = 0
        self.update(text)
        (root / "settings.yaml").symlink_to("..data/settings.yaml")

    @property
    def path(self) -> pathlib.Path:
        return self.root / "settings.yaml"

    def update(self, text: str) -> None:
        self.versions += 1
        version = self.root / f"..version-{self.versions}"
        version.mkdir()
        (version / "settings.yaml").write_text(text)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        link.replace(self.root / "..data")


def test_the_kill_switch_is_read_live_from_a_configmap_volume(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = ConfigMapVolume(tmp_path, "resyncSeconds: 30\nactions:\n  enabled: true\n")
    flags = {"resyncSeconds": 5}
    live = LiveSettings(volume.path, load_settings(volume.path, flags), flags, check_seconds=0)
    assert live.current().actions.enabled

    volume.update("resyncSeconds: 30\nactions:\n  enabled: false\n  dryRun: true\n")
    now = live.current()
    assert not now.actions.enabled and now.actions.dry_run, "actions take effect at once"
    assert now.resync_seconds == 5, "flags still win over the file"

    volume.update("resyncSeconds: 30\nnamespaces: [ml]\nactions:\n  enabled: false\n")
    assert live.current().namespaces == [], "what was built at start-up stays until a restart"
    assert "changed namespaces: takes effect after a restart" in caplog.text

    volume.update("actions:\n  enabled: yes please\n")
    assert live.current().actions.enabled is False, "an invalid file changes nothing"
    assert "actions.enabled: Input should be a valid boolean" in caplog.text


def test_live_settings_look_at_the_file_at_most_once_per_interval(tmp_path: pathlib.Path) -> None:
    volume = ConfigMapVolume(tmp_path, "actions:\n  enabled: true\n")
    live = LiveSettings(volume.path, load_settings(volume.path), check_seconds=3600)
    volume.update("actions:\n  enabled: false\n")
    assert live.current().actions.enabled, "not looked at again within the interval"


def test_pod_security_is_restricted_unless_the_settings_loosen_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("podSecurity: baseline\n")
    assert load_settings(None).pod_security is Level.RESTRICTED
    assert load_settings(path).pod_security is Level.BASELINE

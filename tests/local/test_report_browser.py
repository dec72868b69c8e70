"""The HTML report of a real `gpuwise run`, opened as a user opens it: in a headless Chromium.

A short run on two simulated GPUs playing 'data-starved' gives both plots (step time and GPU
utilization) and an InputBound finding with its recommendation. The same run writes the JSON
report, which holds the data the page must show: every bar and every point is checked against it.

Needs Debian's `chromium` and `chromium-driver` (`make system-deps` installs them) and Selenium;
skipped, with the reason, without them. Selenium is pointed at the system binaries, so Selenium
Manager never runs (it would try to download a browser and driver).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sidecar.support import ROOT, environment

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
MISSING = [
    what
    for what, present in [
        ("chromium (Debian package 'chromium', `make system-deps`)", Path(CHROMIUM).is_file()),
        ("chromedriver (Debian package 'chromium-driver', `make system-deps`)", Path(CHROMEDRIVER).is_file()),
        ("selenium (pip install -e '.[dev]')", importlib.util.find_spec("selenium") is not None),
    ]
    if not present
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)}"),
]

# Headless in a container: no sandbox (root), no GPU, /tmp instead of a small /dev/shm.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,2000")
STEPS = 60
STEPS_PLOT = (900, 260)  # report._steps_plot's width and bar area height
GPU_PLOT = (900, 200)  # report._gpu_plot's width and height
TOLERANCE = 0.15  # the page's coordinates are written to 0.1


def gpuwise_run(out: Path, steps: int, *args: str) -> tuple[Path, dict[str, Any]]:
    """A real run of `steps` steps of 20 ms, half of each waiting for input: its HTML and JSON reports."""
    child = textwrap.dedent(
        f"""
        import time  # <i>"not markup"</i> & </td>: the page must show this, not obey it
        from gpuwise import instrument
        for _ in range({steps}):
            with instrument.data_wait():
                time.sleep(0.01)
            time.sleep(0.01)
            instrument.step_end(samples=2)
        """
    )
    command = [
        sys.executable, "-m", "gpuwise.cli", "run", *args,
        "--report", str(out / "run.json"), "--report", str(out / "run.html"), "--", sys.executable, "-c", child,
    ]  # fmt: skip
    result = subprocess.run(
        command, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return out / "run.html", json.loads((out / "run.json").read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Two simulated GPUs playing 'data-starved': both plots, and an InputBound finding."""
    out = tmp_path_factory.mktemp("report")
    return gpuwise_run(out, STEPS, "--simulate", "data-starved", "--gpus", "2", "--interval", "0.1")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_report_renders_with_its_plots_findings_and_no_console_errors(
    reports: tuple[Path, dict[str, Any]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    page, report = reports
    assert report["steps"] == STEPS and report["backend"]["name"] == "simulated"
    browser.get(page.as_uri())

    # The page: its title names the command, its heading shows.
    assert browser.title.startswith("gpuwise run: "), browser.title
    assert sys.executable in browser.title
    heading = browser.find_element(By.TAG_NAME, "h1")
    assert heading.is_displayed() and heading.text == "gpuwise run"
    plots = browser.find_elements(By.CSS_SELECTOR, "svg[role=img]")
    assert [p.get_attribute("aria-label") for p in plots] == [
        "step time per step, split into input wait and compute",
        "GPU utilization over time",
    ]
    command = browser.find_element(By.XPATH, "//th[text()='Command']/following-sibling::td")
    assert command.get_attribute("textContent") == " ".join(report["command"]), "escaped, shown as it is"
    assert browser.find_elements(By.TAG_NAME, "i") == []
    for plot in plots:
        assert plot.is_displayed() and plot.size["width"] > 800 and plot.size["height"] > 150, plot.size

    _assert_the_step_bars_are_the_steps(browser, plots[0], report["per_step"])
    _assert_the_gpu_lines_are_the_trace(browser, plots[1], report["trace"])
    # Each line is named in a legend, in its own colour.
    legend = browser.find_element(By.CSS_SELECTOR, "svg[aria-label='GPU utilization over time'] + p.legend")
    assert legend.is_displayed() and "GPU 0" in legend.text and "GPU 1" in legend.text, legend.text
    strokes, swatches = browser.execute_script(
        """const css = e => getComputedStyle(e);
           return [Array.from(arguments[0].querySelectorAll('polyline'), p => css(p).stroke),
                   Array.from(arguments[1].querySelectorAll('span'), s => css(s).color)];""",
        plots[1],
        legend,
    )
    assert strokes == swatches and len(set(strokes)) == 2, (strokes, swatches)

    # Findings and recommendations: one visible item each, in the report's words.
    items = browser.find_elements(By.CSS_SELECTOR, "ul > li")
    assert all(item.is_displayed() and item.text.strip() for item in items)
    texts = [item.text for item in items]
    (finding,) = [d for d in report["diagnosis"] if d["kind"] == "InputBound"]
    assert finding["recommendation"] and "Try: num_workers=1" in finding["recommendation"]
    assert f"InputBound: {finding['message']} {finding['recommendation']}" in texts, texts
    for line in report["findings"]:
        assert any(line in text for text in texts), (line, texts)
    assert len(texts) == len(report["findings"]), "one item per finding, nothing else"

    # The console: no errors. The probe shows the log is read at all.
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == [], severe
    browser.execute_script("console.error('gpuwise-probe')")
    assert any("gpuwise-probe" in entry["message"] for entry in browser.get_log("browser"))


def _assert_the_step_bars_are_the_steps(browser: Any, plot: Any, per_step: list[dict[str, Any]]) -> None:
    """One bar per step (fewer than report.PLOT_POINTS of them): compute stacked on input wait,
    its height the step's time against the slowest step's."""
    bars = browser.execute_script(
        """return Array.from(arguments[0].querySelectorAll('rect')).map(r => {
             const box = r.getBBox();
             return [r.getAttribute('class'), box.x, box.y, box.height, r.getBoundingClientRect().width];
           });""",
        plot,
    )
    assert len(per_step) == STEPS and all(s["steps"] == 1 for s in per_step)
    assert [b[0] for b in bars] == ["compute", "wait"] * STEPS
    width, height = STEPS_PLOT
    top = max(s["seconds"] for s in per_step)
    for i, step in enumerate(per_step):
        (_, cx, cy, ch, cw), (_, wx, wy, wh, ww) = bars[2 * i], bars[2 * i + 1]
        assert cw > 0 and ww > 0, f"step {i + 1}'s bar is drawn"
        assert cx == pytest.approx(i * width / STEPS, abs=TOLERANCE) and wx == cx
        assert wh == pytest.approx(step["data_wait_seconds"] / top * height, abs=TOLERANCE)
        assert ch + wh == pytest.approx(step["seconds"] / top * height, abs=2 * TOLERANCE)
        assert wy + wh == pytest.approx(height, abs=TOLERANCE), "bars stand on the axis"
        assert cy + ch == pytest.approx(wy, abs=2 * TOLERANCE), "compute sits on the wait"


def _assert_the_gpu_lines_are_the_trace(browser: Any, plot: Any, trace: list[dict[str, Any]]) -> None:
    """One line per GPU, one vertex per sample of its utilization."""
    lines = browser.execute_script(
        """return Array.from(arguments[0].querySelectorAll('polyline')).map(p => [
             p.querySelector('title').textContent,
             Array.from({length: p.points.numberOfItems}, (_, i) => [p.points.getItem(i).x, p.points.getItem(i).y]),
             p.getTotalLength(),
           ]);""",
        plot,
    )
    samples: dict[int, list[tuple[float, float]]] = {}
    for record in trace:
        samples.setdefault(record["gpu"], []).append((record["t"], record["values"]["DCGM_FI_DEV_GPU_UTIL"]))
    assert sorted(samples) == [0, 1] and all(len(points) >= 5 for points in samples.values()), samples
    assert [title for title, _, _ in lines] == ["GPU 0", "GPU 1"]
    width, height = GPU_PLOT
    end = max(t for points in samples.values() for t, _ in points)
    for (_, vertices, length), gpu in zip(lines, sorted(samples), strict=True):
        assert len(vertices) == len(samples[gpu]), f"GPU {gpu}: a vertex per sample"
        assert length > 0, f"GPU {gpu}'s line is drawn"
        for (x, y), (t, util) in zip(vertices, samples[gpu], strict=True):
            assert x == pytest.approx(t / end * width, abs=TOLERANCE)
            assert y == pytest.approx(height - util / 100 * height, abs=TOLERANCE)


def test_a_run_too_short_to_judge_says_so_on_the_page(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    page, report = gpuwise_run(tmp_path, 8)
    assert report["not_judged"] and report["not_judged"].startswith("Too short to judge: 8 steps")
    browser.get(page.as_uri())
    texts = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "ul > li") if item.is_displayed()]
    assert report["not_judged"] in texts, texts
    (steps,) = browser.find_elements(By.CSS_SELECTOR, "svg[aria-label^='step time']")
    assert steps.is_displayed() and len(steps.find_elements(By.CSS_SELECTOR, "rect.wait")) == 8
    if not report["trace"]:  # no GPU here: the page says so and draws no GPU plot
        assert browser.find_elements(By.CSS_SELECTOR, "svg[aria-label='GPU utilization over time']") == []
        assert "GPU utilization" not in browser.find_element(By.TAG_NAME, "body").text
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []

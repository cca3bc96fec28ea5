"""A real headless Chromium for the HTML tests: the page's DOM as the browser built it, and a
screenshot decoded to pixels (Pillow, which matplotlib brings).

Chromium comes from the distribution's packages (Debian: ``chromium``; ``make venv`` installs
it when run as root). Without it the browser tests are skipped and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from PIL import Image

#: Names the distributions give the browser binary.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Flags that work as root in a container with no display, no GPU and no network wanted:
#: every background fetch (component updates, sync, QUIC probes) is switched off.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip(
            "no Chromium on PATH (Debian package 'chromium': `apt-get install chromium`, "
            "or `make venv` as root): the HTML report is not checked in a browser"
        )
    return found


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    browser = require_chromium()
    with tempfile.TemporaryDirectory(prefix="ckptctl-chromium-") as profile:
        return subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "HOME": profile},
        )


def dump_dom(page: Path, timeout: float = 90) -> str:
    """The DOM after the browser parsed and laid out ``page`` (``--dump-dom``)."""
    proc = _run(["--dump-dom", page.resolve().as_uri()], timeout)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    return proc.stdout


def screenshot(page: Path, out: Path, width: int, height: int, timeout: float = 90) -> Image.Image:
    """A ``width`` x ``height`` screenshot of ``page``, decoded (RGB)."""
    pil = pytest.importorskip("PIL.Image", reason="Pillow (a dependency of matplotlib) decodes the screenshot")
    proc = _run([f"--window-size={width},{height}", f"--screenshot={out}", page.resolve().as_uri()], timeout)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    with pil.open(out) as img:
        return img.convert("RGB")

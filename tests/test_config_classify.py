"""ckptctl.yaml's classify.signatures reaches `ckptctl classify` and `ckptctl recover`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.adapters.config_file import parse_config_yaml
from ckptctl.errors import ConfigError

SIG = """\
signatures:
  - id: site-fabric-flap
    pattern: 'fabricd: port (?P<gpu_index>\\d+) flapped'
    keywords: [fabricd]
    category: infra
    confidence: high
    drain: true
    description: our fabric daemon saw a port flap
    action: Drain the host and open a fabric ticket.
    examples: ['Nov 21 03:00:00 gpu-node-07 fabricd: port 3 flapped']
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    return subprocess.run([sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_config_signatures_are_used_by_classify(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(SIG)
    log = tmp_path / "node.log"
    log.write_text("Nov 21 03:00:00 gpu-node-07 fabricd: port 3 flapped\n")
    without = _run(["classify", str(log), "--json"], tmp_path)
    assert without.returncode == 13, without.stderr  # unknown: the built-in catalog knows nothing of it
    (tmp_path / "ckptctl.yaml").write_text(f"classify:\n  signatures: [{tmp_path / 'site.yaml'}]\n")
    found = _run(["classify", str(log), "--json"], tmp_path)  # ./ckptctl.yaml picked up
    assert found.returncode == 10, found.stderr
    doc = json.loads(found.stdout)
    assert doc["root_cause"]["signature"] == "site-fabric-flap"
    assert doc["hosts"] == ["gpu-node-07"]


def test_config_classify_section_is_validated() -> None:
    with pytest.raises(ConfigError, match="classify"):
        parse_config_yaml("classify:\n  signaturez: [a.yaml]\n")
    cfg = parse_config_yaml("classify:\n  signatures: [a.yaml, b.yaml]\n")
    assert cfg.classify.signatures == ("a.yaml", "b.yaml")

"""`ckptctl report` and the HTML `recover` writes, from real recoveries, looked at in a real browser.

The run root is made once per module by two real `ckptctl recover` runs (real torchrun,
real DCP checkpoints; the helpers of tests/test_recover.py):

1. an XID 79 on gpu-node-2 (infra): the drain runs (a PATH shim stands for scontrol), the
   resume from step_30 spikes, the watch stops it, step_30 and the step_32 the bad run saved
   are quarantined, and the resume from step_20 is continuous (human output: the chart);
2. the same host fails again (a new kern.log): drained a second time (an RMA candidate),
   resumed from the good run's step_32, continuous (--json).

The report is then opened in headless Chromium (`tests/browser.py`): its text as the browser
built the DOM, and a screenshot whose chart pixels are counted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import browser
from tests.test_recover import (
    CKPTCTL,
    XID79,
    _env,
    fake_scheduler_cli,
    golden_scene,
    path_with,
    recover_json,
    run_recover,
    snapshot,
)

pytest.importorskip("matplotlib", reason="the HTML report needs the 'report' extra (matplotlib, Jinja2)")
pytest.importorskip("jinja2", reason="the HTML report needs the 'report' extra (matplotlib, Jinja2)")

SPIKE_ARGS = ("--spike-from-step", "30", "--save-at-step", "32", "--hang-s", "90")
#: Colours of the loss chart (ckptctl/ops/report_charts.py): the resumed losses, the points
#: above the threshold, the tolerance band (drawn at 45% over white).
AFTER_BLUE = (0x25, 0x63, 0xEB)
ABOVE_RED = (0xDC, 0x26, 0x26)


@dataclass(frozen=True)
class Run:
    dir: Path
    root: Path
    first_stdout: str
    """recover 1's human output (not a terminal)."""
    second: dict[str, Any]
    """recover 2's --json document."""
    seconds: float


def ckptctl(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CKPTCTL, *args], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, golden: dict[int, Path]) -> Run:
    tmp = tmp_path_factory.mktemp("report")
    s = golden_scene(tmp, golden, *SPIKE_ARGS)
    bin_dir, _ = fake_scheduler_cli(tmp, "scontrol")
    env = _env(PATH=path_with(bin_dir))
    (s.dir / "kern.log").write_text(XID79)
    t0 = time.monotonic()
    first = run_recover(
        "--config", str(s.config), "--logs", "kern.log", "--baseline", "baseline.log", "--execute-drain",
        cwd=s.dir, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-5000:]
    # The same host fails again, later; the job no longer goes wrong.
    cfg = yaml.safe_load(s.config.read_text())
    cfg["launch"]["script_args"] = ["--steps", "40"]
    s.config.write_text(yaml.safe_dump(cfg))
    (s.dir / "kern.log").write_text(XID79)
    code, second, err = recover_json(
        "--config", str(s.config), "--logs", "kern.log", "--baseline", "baseline.log", "--execute-drain",
        cwd=s.dir, env=env,
    )  # fmt: skip
    assert code == 0, err[-5000:]
    return Run(s.dir, s.root, first.stdout, second, time.monotonic() - t0)


def report_json(root: Path) -> dict[str, Any]:
    proc = ckptctl("report", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


# -- the data -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_report_document_is_the_other_commands_documents(run: Run) -> None:
    doc = report_json(run.root)
    assert doc["schema"] == "ckptctl.report/1" and doc["root"] == str(run.root)
    # the ledger is `incidents --json`, whole (whatever incidents computes, the report shows)
    incidents = json.loads(ckptctl("incidents", str(run.root), "--json").stdout)
    assert doc["incidents"] == incidents
    assert incidents["num_incidents"] == 2 and incidents["rma_candidates"] == ["gpu-node-2"]
    # the checkpoints are `list --json`
    listing = json.loads(ckptctl("list", str(run.root), "--json").stdout)
    assert doc["checkpoints"] == listing
    # the recoveries are the reports recover wrote, as written
    stored = sorted((run.root / ".ckptctl").glob("recovery-*.json"))
    assert [json.loads(p.read_text()) for p in stored] == doc["recoveries"]
    assert [[a["watch_verdict"] for a in r["attempts"]] for r in doc["recoveries"]] == [
        ["spike", "continuous"],
        ["continuous"],
    ]
    assert sorted(r["from"] for r in doc["audit"] if r["action"] == "quarantine") == ["step_30", "step_32"]


@pytest.mark.slow
def test_the_watch_json_stores_the_points_the_picture_needs(run: Run) -> None:
    """The curve around each resume is in the report recover wrote: the run root alone can draw it."""
    rep = report_json(run.root)["recoveries"][0]
    spiked, good = (a["watch"] for a in rep["attempts"])
    for w in (spiked, good):
        curve = w["curve"]
        # the judged points are the observed ones, with the lr the trainer logged
        assert [p[:2] for p in curve["after"]] == w["observed"]["losses"]
        assert all(p[2] is not None for p in curve["after"] + curve["before"])
        # the level and threshold per point are the ones judged: the first is the report's threshold
        assert curve["expected"][0][1] == w["baseline"]["level"]
        assert curve["expected"][0][2] == pytest.approx(w["threshold"]["value"])
        assert [e[0] for e in curve["expected"]] == [p[0] for p in curve["after"]]
        assert curve["before"][-1][0] == 35  # baseline.log's last step
    assert all(p[1] > e[2] for p, e in zip(spiked["curve"]["after"], spiked["curve"]["expected"], strict=True))
    assert all(p[1] <= e[2] for p, e in zip(good["curve"]["after"], good["curve"]["expected"], strict=True))


# -- the page, in a browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(run: Run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page") / "report.html"
    before = snapshot(run.root)
    proc = ckptctl("report", str(run.root), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(run.root) == before, "report is read-only: it writes the -o file only"
    assert f"wrote {out}" in proc.stderr
    return out


@pytest.mark.slow
def test_the_page_text_in_chromium_names_incidents_verdicts_checkpoints_and_hosts(page: Path, run: Run) -> None:
    dom = browser.dump_dom(page)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    assert "Run report" in text and str(run.root) in text
    # the incidents, with their cause, verdicts and outcome
    assert re.search(r"\b1 \S+ \S+Z infra .* \b2 \S+ \S+Z infra ", text), text[:3000]
    for words in ("spike", "continuous", "recovered", "stopped by the watch", "time lost"):
        assert words in text, words
    # the checkpoints: quarantined with the watch's reason; complete ones
    quarantined = [n.name for n in run.root.iterdir() if ".quarantined-" in n.name]
    assert len(quarantined) == 2
    for name in quarantined:
        assert re.search(re.escape(name) + r" quarantined quarantined: [^<]*spike", text), name
    assert re.search(r"\b20 step_20 complete\b", text)
    # drained hosts and the RMA candidate
    assert re.search(r"gpu-node-2 2 2 .* RMA candidate", text)
    # one loss chart per attempt with a watch, plus the timeline: inline SVG in the DOM
    assert dom.count("<svg") == 4


@pytest.mark.slow
def test_the_screenshot_shows_the_charts(page: Path, tmp_path: Path) -> None:
    img = browser.screenshot(page, tmp_path / "shot.png", 1100, 3600)
    w, h = img.size
    data = img.tobytes()

    def pixels_near(ref: tuple[int, int, int], tol: int) -> list[tuple[int, int]]:
        out = []
        for y in range(h):
            row = data[y * w * 3 : (y + 1) * w * 3]
            for x in range(0, w, 1):
                r, g, b = row[3 * x], row[3 * x + 1], row[3 * x + 2]
                if abs(r - ref[0]) <= tol and abs(g - ref[1]) <= tol and abs(b - ref[2]) <= tol:
                    out.append((x, y))
        return out

    white = data.count(b"\xff\xff\xff")  # a rough count (triples across pixel borders count too)
    assert white < 0.97 * w * h, "the page is blank"
    blue = pixels_near(AFTER_BLUE, 40)
    red = pixels_near(ABOVE_RED, 30)
    # The resumed losses are drawn in three charts (attempts: spike, continuous; continuous):
    # rows holding blue pixels fall into bands: each chart's curve and its legend swatch.
    bands: list[list[tuple[int, int]]] = []
    for x, y in sorted(blue, key=lambda p: p[1]):
        if bands and y - bands[-1][-1][1] < 30:
            bands[-1].append((x, y))
        else:
            bands.append([(x, y)])
    widths = [max(x for x, _ in b) - min(x for x, _ in b) for b in bands if len(b) > 20]
    assert len(widths) >= 5, widths  # 3 curves + 3 legend swatches (the spiked curve is mostly red)
    # the two continuous resumes (10 and 8 points) are curves across steps, not dots or swatches
    assert sorted(widths)[-2] > 100, widths
    # the spiked points of the first resume, in red above its curve's band
    assert len(red) > 30, len(red)


@pytest.mark.slow
def test_the_page_references_nothing_outside_itself(page: Path, run: Run) -> None:
    recover_html = Path(run.second["report_html"])
    for path in (page, recover_html):
        assert_self_contained(path.read_text(encoding="utf-8"))


def assert_self_contained(html: str) -> None:
    lowered = html.lower()
    assert "http://" not in lowered and "https://" not in lowered
    assert "@import" not in lowered
    # every src/href/url() points inside the page (a fragment)
    for m in re.finditer(r"""\b(?:src|href|xlink:href|action|srcset|poster|data)\s*=\s*["']?([^"'\s>]*)""", html, re.I):
        assert m.group(1).startswith("#"), m.group(0)
    for m in re.finditer(r"url\(\s*['\"]?([^)'\"]*)", html, re.I):
        assert m.group(1).startswith("#"), m.group(0)
    assert not re.search(r"<\s*(script|link|iframe|object|embed|img|base)\b", html, re.I)


def test_the_reference_check_sees_what_it_must_refuse() -> None:
    for bad in (
        '<img src="chart.png">',
        '<link rel="stylesheet" href="style.css">',
        "<style>@import 'x.css';</style>",
        "<div style=\"background: url('bg.png')\"></div>",
        '<script src="//cdn.example/x.js"></script>',
        "<p>see https://example.com</p>",
    ):
        with pytest.raises(AssertionError):
            assert_self_contained(bad)
    assert_self_contained('<svg><use xlink:href="#m1"/><path clip-path="url(#p1)"/></svg><a href="#top">top</a>')


@pytest.mark.slow
def test_edited_records_are_drawn_or_refused_in_one_line(run: Run, tmp_path: Path) -> None:
    """Reports are files anyone can edit: odd values render or give one error line, never a traceback."""
    root = tmp_path / "run"
    shutil.copytree(run.root, root)
    (report,) = [p for p in sorted((root / ".ckptctl").glob("recovery-*.json"))][:1]
    doc = json.loads(report.read_text())
    watch = doc["attempts"][0]["watch"]
    watch["curve"] = {"before": [["x", 1], [3, "nan"], None], "after": [[31, "inf", None], [32, 4.0, "lr"]],
                      "expected": [[31, None, 2.0], [32]]}  # fmt: skip
    watch["resume_step"] = "thirty"
    doc["incident"]["phases_s"] = {"drain": "slow", "relaunch": -3}
    report.write_text(json.dumps(doc))
    out = tmp_path / "r.html"
    proc = ckptctl("report", str(root), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert_self_contained(out.read_text())
    doc["drain"] = 7  # not a list
    report.write_text(json.dumps(doc))
    proc = ckptctl("report", str(root), "-o", str(tmp_path / "r2.html"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot draw the report: a value in the run root's records")
    assert not (tmp_path / "r2.html").exists()


# -- recover writes it; the terminal chart ----------------------------------------------------------


@pytest.mark.slow
def test_recover_writes_the_html_beside_its_json_report(run: Run) -> None:
    doc = run.second
    html = Path(doc["report_html"])
    assert html == Path(doc["report_path"]).with_suffix(".html") and html.is_file()
    assert json.loads(Path(doc["report_path"]).read_text())["report_html"] == str(html)
    text = html.read_text(encoding="utf-8")
    # written at the end of that recovery: both incidents are in it, the RMA candidate too
    assert text.count("<svg") == 4 and "RMA candidate" in text
    assert run.seconds < 240, f"two recoveries took {run.seconds:.0f} s"


@pytest.mark.slow
def test_recover_prints_the_loss_chart_in_ascii_when_not_a_terminal(run: Run) -> None:
    out = run.first_stdout
    charts = [m.start() for m in re.finditer(r"^  loss around the resume \(checkpoint step (\d+)", out, re.M)]
    assert len(charts) == 2, out
    assert "verdict spike" in out and "verdict continuous" in out
    assert re.search(r"^  +thr \d", out, re.M) and "# above the threshold" in out
    assert out.isascii() and "\x1b[" not in out
    # --json carries no chart
    assert "loss around the resume" not in json.dumps(run.second)


# -- the library stays out of the fast commands ---------------------------------------------------


def test_fast_commands_do_not_import_the_report_libraries(run_root: Path, tmp_path: Path) -> None:
    log = Path(__file__).parent / "fixtures" / "losslogs" / "ckptctl_resume_spike.log"
    (tmp_path / "kern.log").write_text(XID79)
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        "for argv in (['--help'], ['list', ROOT], ['locate', ROOT], ['verify', ROOT + '/step_30'],\n"
        "             ['classify', KERN], ['watch', LOG], ['report', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "bad = sorted(m for m in ('matplotlib', 'jinja2', 'torch') if m in sys.modules)\n"
        "assert not bad, bad\n"
    ).replace("ROOT", repr(str(run_root))).replace("KERN", repr(str(tmp_path / "kern.log"))).replace("LOG", repr(str(log)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_without_the_extra_html_is_one_error_line_and_json_still_works(run_root: Path, tmp_path: Path) -> None:
    """matplotlib made unimportable in the child (as on an install without the 'report' extra)."""
    out = tmp_path / "r.html"
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from ckptctl.cli.app import main\n"
        f"main(['report', {str(run_root)!r}, '-o', {str(out)!r}])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.startswith("error: the HTML report needs the 'report' extra") and "Traceback" not in proc.stderr
    assert "pip install 'ckptctl[report]'" in proc.stderr
    assert report_json(run_root)["incidents"]["num_incidents"] == 0


def test_bad_invocations(run_root: Path, tmp_path: Path) -> None:
    proc = ckptctl("report", str(run_root))
    assert proc.returncode == 2 and "give -o FILE" in proc.stderr
    proc = ckptctl("report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html"))
    assert proc.returncode == 1 and proc.stderr.startswith("error:") and not (tmp_path / "x.html").exists()
    proc = ckptctl("report", str(run_root), "-o", str(tmp_path / "no-such-dir" / "x.html"))
    assert proc.returncode == 1 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_an_empty_run_root_renders(run_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    proc = ckptctl("report", str(run_root), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "No recovery has been recorded" in html and "step_30" in html
    assert_self_contained(html)
    # -o - writes the same page to stdout (only the generation time differs)
    piped = ckptctl("report", str(run_root), "-o", "-")
    assert piped.returncode == 0 and piped.stderr == ""
    stamp = re.compile(r"generated \S+Z")
    assert stamp.sub("", piped.stdout) == stamp.sub("", html)

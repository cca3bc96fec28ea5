"""classify on logs it was not written for: the realistic corpus, suspects, real torchrun.

The corpus (tests/fixtures/logs_realistic/, labels.yaml written before the tool was
run on it) is scored by bench/classify_accuracy.py; here its targets are a test.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptctl.ops import classify as ops
from ckptctl.ops.classify_catalog import load_default_signatures

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "logs_realistic"


def _accuracy_module() -> Any:
    spec = importlib.util.spec_from_file_location("classify_accuracy", REPO / "bench" / "classify_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_realistic_corpus_meets_the_targets() -> None:
    bench = _accuracy_module()
    s = bench.score(CORPUS, verbose=False)
    assert s["cases"] >= 60 and s["producers"] >= 15
    assert s["category_accuracy"] >= bench.TARGET_CATEGORY
    assert s["culprit_recall"] >= bench.TARGET_CULPRIT
    assert s["confident_on_thin"] == 0


def test_open_world_corpus_meets_the_targets() -> None:
    """Platforms, schedulers and fabrics the first corpora did not cover, ckptctl's own
    preemption words and evidence spread over lines (tests/fixtures/logs_openworld/,
    labelled before classify was run on it; first run 100% category, 13/15 culprits)."""
    bench = _accuracy_module()
    s = bench.score(REPO / "tests" / "fixtures" / "logs_openworld", verbose=False)
    assert s["cases"] >= 30 and s["producers"] >= 30
    assert s["category_accuracy"] >= 0.95
    assert s["culprit_recall"] >= bench.TARGET_CULPRIT
    assert s["confident_on_thin"] == 0


def classify_dir(name: str) -> dict[str, Any]:
    return ops.classify_logs([str(CORPUS / name)], jobs=1).to_json()


def test_link_fault_names_both_endpoints_and_how_to_tell() -> None:
    doc = classify_dir("nccl_ib_status12")
    assert doc["category"] == "infra" and doc["hosts"] == []  # nothing drained on one side's word
    ends = [s for s in doc["suspects"] if s["role"] == "endpoint"]
    assert [(s["host"], s["peer"]) for s in ends] == [("gpu-d01", None), (None, "10.20.3.14")]
    assert {"gpu-d01", "10.20.3.14"} <= set(doc["suspect_hosts"])
    assert "ibstat" in doc["action"] and "ibv_devinfo" in doc["action"] and "gpu-d01" in doc["action"]


def test_reverse_dns_names_the_host_behind_the_peer_ip() -> None:
    doc = classify_dir("reverse_dns_peer")
    remote = [s for s in doc["suspects"] if s["peer"] == "10.1.4.22"]
    assert remote and remote[0]["host"] == "gpu-d09"
    assert doc["root_cause"]["peer_host"] == "gpu-d09"
    assert "gpu-d09" in doc["action"]


def test_multi_line_kernel_message_is_joined_to_its_gpu() -> None:
    doc = classify_dir("fallen_off_bus_multiline")
    assert (doc["category"], doc["hosts"]) == ("infra", ["gpu-c11"])
    assert [g["pci_bus_id"] for g in doc["gpus"]] == ["0000:ca:00"]
    assert doc["root_cause"]["signature"] == "gpu-fallen-off-bus"


def test_shell_prompt_names_the_host_of_the_output_below_it() -> None:
    doc = classify_dir("shell_prompt_smi")
    assert doc["hosts"] == ["gpu-b07"] and doc["root_cause"]["host_source"] == "section"


def test_kubectl_describe_names_the_pod() -> None:
    doc = classify_dir("k8s_oomkilled")
    assert doc["category"] == "job"
    assert doc["suspects"][0]["pod"] == "pytorchjob-llm-worker-3"
    assert doc["suspects"][0]["host"] == "gpu-pool-a-7"


def test_nvlink5_xid_and_recovery_action_xid_keep_the_first_as_root() -> None:
    doc = classify_dir("xid145_gb200")
    assert doc["root_cause"]["xid"] == 145 and doc["hosts"] == ["gb200-r07-n2"]
    doc = classify_dir("xid154_after_48")
    assert doc["root_cause"]["xid"] == 48 and doc["confidence"] == "high"


def test_every_xid_of_the_catalog_is_known() -> None:
    xids = {s.xid for s in load_default_signatures() if s.xid is not None}
    assert set(range(1, 173)) - {13} <= xids | {13}
    assert set(range(1, 173)) <= xids


@pytest.mark.parametrize(
    ("case", "category", "role", "who"),
    [
        ("sigkill_bare_torchrun", "unknown", "first-failure", ("worker-7", 1)),
        ("gloo_only_closed", "unknown", "peer", (None, None)),
        # NCCL's own class (ncclRemoteError) is all there is: infra at low, the peer still the suspect
        ("nccl_remote_error_bare", "infra", "peer", ("gpu-u7", None)),
        ("srun_killed_bare", "preemption", "stopped", ("gpu-v1", None)),  # a bare scancel: low-confidence preemption
    ],
)
def test_thin_evidence_is_never_confident_but_names_suspects(
    case: str, category: str, role: str, who: tuple[str | None, int | None]
) -> None:
    doc = classify_dir(case)
    assert (doc["category"], doc["confidence"]) == (category, "low") and doc["hosts"] == []
    assert any(s["role"] == role and (s["host"] or s["peer"], s["rank"]) == (who[0] or s["peer"], who[1])
               for s in doc["suspects"]), doc["suspects"]  # fmt: skip


def test_first_failure_wins_over_peers_symptoms() -> None:
    """The dying rank's OOM-killer event is the root cause; the other ranks' timeouts are symptoms."""
    doc = classify_dir("oom_killer_first_failure")
    assert doc["category"] == "job" and doc["root_cause"]["signature"] == "kernel-oom-killer"
    assert doc["suspects"][0]["host"] == "gpu-a02"
    assert {e["signature"] for e in doc["symptoms"]} >= {"nccl-watchdog-timeout", "rank-sigkill"}


# -- real torchrun -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("crash_rank", [0, 1])
def test_real_torchrun_gloo_crash_is_not_a_job_fault(tmp_path: Path, crash_rank: int) -> None:
    """examples/train.py on 2 gloo ranks, one SIGKILLed (--crash-at-step): the survivor's
    'Connection closed by peer' is a symptom, so the verdict is unknown (a bare SIGKILL),
    never 'job, do not resume', and torchrun's first failed rank is the suspect."""
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--tee=3",
         str(REPO / "examples" / "train.py"), "--ckpt-root", str(tmp_path / "run"),
         "--steps", "20", "--save-every", "5", "--crash-at-step", "8", "--crash-rank", str(crash_rank)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    log = tmp_path / "torchrun.log"
    log.write_text(proc.stdout + proc.stderr)
    doc = ops.classify_logs([str(log)], jobs=1).to_json()
    assert doc["category"] != "job", doc["reasons"]
    assert doc["category"] == "unknown" and doc["confidence"] == "low"
    first = [s for s in doc["suspects"] if s["role"] == "first-failure"]
    assert first and first[0]["rank"] == crash_rank
    signatures = {t["id"] for t in doc["signatures"]}
    if "Connection closed by peer" in log.read_text():
        assert "gloo-peer-closed" in signatures


def classify_open_world(name: str) -> dict[str, Any]:
    return ops.classify_logs([str(REPO / "tests" / "fixtures" / "logs_openworld" / name)], jobs=1).to_json()


def test_jax_coordination_service_lines_are_consequences_not_a_preemption() -> None:
    """XLA's "the remote task has failed, got preempted, or crashed" lists possibilities:
    alone, the verdict is unknown (it said preemption/high before cls22)."""
    doc = classify_open_world("o_jax_coordination_heartbeat_only")
    assert doc["category"] == "unknown" and doc["confidence"] == "low"
    assert {e["signature"] for e in doc["evidence"]} >= {"xla-coordination-task-error", "xla-coordination-agent-error"}


def test_amdgpu_failed_reset_names_the_gpu_from_the_driver_prefix() -> None:
    doc = classify_open_world("o_amdgpu_ring_timeout_reset_failed")
    assert (doc["category"], doc["root_cause"]["signature"]) == ("infra", "amdgpu-reset-failed")
    assert [g["pci_bus_id"] for g in doc["gpus"]] == ["0000:29:00"]


def test_grid_engine_limit_is_a_low_confidence_preemption_that_says_how_to_tell() -> None:
    """qacct's failed 37 does not say whether h_rt or h_vmem was hit: low confidence, and
    the action names the fields that settle it."""
    doc = classify_open_world("o_sge_qacct_h_rt_limit")
    assert (doc["category"], doc["confidence"]) == ("preemption", "low")
    assert "h_rt" in doc["action"] and "h_vmem" in doc["action"]
    host = classify_open_world("o_sge_qacct_prolog_failed")
    assert (host["category"], host["root_cause"]["signature"]) == ("infra", "sge-failed-host")


def test_rays_actor_record_names_the_node_the_actor_died_with() -> None:
    doc = classify_open_world("o_ray_actor_record_node_died")
    assert (doc["category"], doc["root_cause"]["signature"]) == ("infra", "ray-actor-node-died")
    assert doc["suspect_hosts"] == ["10.40.2.23"] and doc["hosts"] == []  # not drained on Ray's word

"""Round-6b open-world vocabularies (hardware, fabric, network, storage): DCGM's health-watch
failure reasons (DCGM_FR_*; an XID incident through the XID catalog), the Fabric Manager's
NV_WARN_NOTHING_TO_DO status (and its unit's failure as a consequence), cuFile / GPUDirect
Storage being unavailable, the Lustre client's RPC and LNet failures, the BeeGFS client's
kernel log, the pre-4.x kernels' RCU stall wording, a connect refused at a loopback address
(Gloo, NCCL), aws-ofi-nccl finding no libfabric provider, MPICH's GPU IPC map, and NCCL's own
result class deciding at low confidence when nothing else does.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # DCGM health watches: an XID incident is the XID's catalog entry (79: fallen off the bus)
    ("ErrorCode:DCGM_FR_XID_ERROR GPU:6 PCI:0000:cb:00.0 GPU_UUID:GPU-0f0e0d0c-1111-2222-3333-444455556666 "
     "Detected XID 79 for GPU 6 Please consult the documentation for details of this XID. "
     "Recommended Action=RESTART_VM;", "dcgm-health-xid", "infra", "high"),
    ("ErrorCode:DCGM_FR_XID_ERROR GPU:1 PCI:0000:1b:00.0 GPU_UUID:GPU-aa Detected XID 13 for GPU 1 Please "
     "consult the documentation for details of this XID. Recommended Action=NONE;", "dcgm-health-xid", "job",
     "medium"),
    # any other DCGM_FR_* code: a health watch failed, low (documented false positives)
    ("ErrorCode:DCGM_FR_PCI_REPLAY_RATE GPU:2 PCI:0000:3b:00.0 Detected more than 8 PCIe replays per minute "
     "for GPU 2 : 12 Reconnect PCIe card. Recommended Action=NONE;", "dcgm-health-incident", "infra", "low"),
    # the Fabric Manager on a system without NVSwitch: a configuration, not a GPU fault
    ("Mar 03 08:01:02 ws-7 nv-fabricmanager[901]: request to query NVSwitch device information from NVSwitch "
     "driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", "fabric-manager-nothing-to-do",
     "job", "low"),
    # its unit's failure alone says nothing of why: a consequence
    ("Mar 03 08:01:02 ws-7 systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
     "status=1/FAILURE", "fabric-manager-unit-failed", "unknown", "low"),
    # GPUDirect Storage unavailable for the file or host
    (" 03-03-2026 08:01:02:113 [pid=7001 tid=7001] ERROR  cufio:340 cuFileHandleRegister error: internal error",
     "cufile-gds-unavailable", "job", "low"),
    (" 03-03-2026 08:01:02:113 [pid=7001 tid=7001] ERROR  cufio-drv:716 nvidia-fs.ko driver not loaded",
     "cufile-gds-unavailable", "job", "low"),
    # the Lustre client losing its servers
    ("[Tue Mar  3 08:01:02 2026] LustreError: 11-0: lfs01-OST0003-osc-ffff9a0c12345000: operation ost_read to "
     "node 10.2.0.4@o2ib failed: rc = -110", "lustre-rpc-failed", "infra", "medium"),
    ("[Tue Mar  3 08:01:02 2026] LNet: 3310:0:(o2iblnd_cb.c:3201:kiblnd_check_conns()) Timed out tx for "
     "10.2.0.4@o2ib: 31 seconds", "lustre-rpc-failed", "infra", "medium"),
    ("[Tue Mar  3 08:01:02 2026] Lustre: 3320:0:(client.c:2133:ptlrpc_expire_one_request()) @@@ Request sent "
     "has timed out for slow reply: [sent 1772524862/real 1772524862]", "lustre-rpc-failed", "infra", "medium"),
    # the BeeGFS client module
    ("[3301.118] beegfs: mount(4410): Unable to connect to management node", "beegfs-client-error", "infra",
     "low"),
    # old kernels' RCU stall wording
    ("Mar  3 08:01:02 gpu-n7 kernel: INFO: rcu_sched self-detected stall on CPU { 31}  (t=60001 jiffies)",
     "kernel-soft-lockup", "infra", "medium"),
    ("Mar  3 08:01:02 gpu-n7 kernel: INFO: rcu_sched_state detected stall on CPU 4 (t=15000 jiffies)",
     "kernel-soft-lockup", "infra", "medium"),
    # a connect refused at a loopback address: the host name resolves to 127.x
    ("  what():  [/opt/torch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:29511: "
     "Connection refused", "connect-refused-loopback", "job", "low"),
    ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
     "timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:40001", "connect-refused-loopback",
     "job", "low"),
    ("gpu-n7:311:390 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.1.1<40213> failed : "
     "Connection refused", "connect-refused-loopback", "job", "low"),
    # aws-ofi-nccl: no libfabric provider visible
    ("p5-n3:2001:2050 [2] nccl_net_ofi_rdma_init:7990 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data "
     "available", "ofi-getinfo-no-provider", "job", "low"),
    # MPICH's GPU IPC map
    ("MPIDI_GPU_ipc_handle_map(412)...: gpu_ipc_handle_map failed", "mpich-gpu-ipc-map-failed", "job", "low"),
    # NCCL could not open an HCA: low (a container without the device files prints the same)
    ("pod-7f:88:88 [0] transport/net_ib.cc:151 NCCL WARN NET/IB : Unable to open device mlx5_4",
     "nccl-ib-open-device-failed", "infra", "low"),
    # NCCL's result class alone: system / remote is infra at low confidence, internal says nothing
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.21.5", "nccl-system-error", "infra", "low"),
    ("ncclInternalError: Internal check failed.", "nccl-comm-failed", "unknown", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round6b_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)
    if confidence == "low":
        assert v.hosts == ()  # nothing low drains a node


@pytest.mark.parametrize(
    "line",
    [
        # a refused connect to a real peer stays the peer's consequence (Gloo's own rule)
        "  what():  [/src/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.3.0.12]:29400: Connection "
        "refused",
        # an address that merely starts with 127 in another octet is not loopback
        "gpu-n7:311:390 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.127.0.1<40213> failed : "
        "Connection refused",
        # a Lustre line that is not an RPC failure
        "Lustre: lfs01-OST0003-osc-ffff9a0c12345000: Connection restored to 10.2.0.4@o2ib (at 10.2.0.4@o2ib)",
        # cuFile's notices are not errors
        " 03-03-2026 08:01:02:113 [pid=7001 tid=7001] NOTICE  cufio-drv:720 running in compatible mode",
    ],
)
def test_lookalikes_are_not_the_new_rules(line: str) -> None:
    match = MATCHER.match_line(line)
    new = {"connect-refused-loopback", "lustre-rpc-failed", "cufile-gds-unavailable"}
    assert match is None or match.signature.id not in new


def test_lustre_error_is_not_a_python_exception() -> None:
    # before round 6b "LustreError: ..." read as a Python exception: a job fault (job/medium)
    v = verdict_of(
        "[Tue Mar  3 08:01:02 2026] LustreError: 11-0: lfs01-MDT0000-mdc-ffff9a0c12345000: operation "
        "mds_getattr to node 10.2.0.5@o2ib failed: rc = -107\n"
    )
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.signature.id == "lustre-rpc-failed"


def test_fabric_manager_status_explains_its_unit_failure() -> None:
    text = (
        "Mar 03 08:01:02 ws-7 nv-fabricmanager[901]: request to query NVSwitch device information from NVSwitch "
        "driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n"
        "Mar 03 08:01:02 ws-7 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
        "status=1/FAILURE\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("job", "low")
    assert v.hosts == ()
    # CUDA failing to start on an NVSwitch system is still the Fabric Manager down (infra)
    v = verdict_of("RuntimeError: CUDA error: system not yet initialized\n" + text.splitlines()[1] + "\n")
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.signature.id == "fabric-manager-down"


def test_nccl_class_decides_low_and_names_the_peer() -> None:
    text = (
        "gpu-a3:4411:4470 [2] NCCL WARN socketStartConnect: Connect to 10.4.0.9<41221> failed : Connection refused\n"
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8\n"
        "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("infra", "low")
    assert v.hosts == ()  # never a drain on NCCL's word alone
    assert any(s.peer == "10.4.0.9" for s in v.suspects)
    # any cause in the input outweighs NCCL's class (a GPU OOM on the same rank)
    v = verdict_of(text + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert v.category == "job"


def test_round6b_signatures_record_their_source() -> None:
    ids = [s.id for s in SIGNATURES]
    for sig_id in ("dcgm-health-xid", "dcgm-health-incident", "fabric-manager-nothing-to-do",
                   "fabric-manager-unit-failed", "cufile-gds-unavailable", "lustre-rpc-failed",
                   "beegfs-client-error", "connect-refused-loopback", "ofi-getinfo-no-provider",
                   "mpich-gpu-ipc-map-failed", "nccl-ib-open-device-failed", "nccl-comm-failed"):
        sig = SIGNATURES[ids.index(sig_id)]
        assert sig.source or sig.role == "symptom", sig_id
    # the XID incident is read before the generic DCGM entry, the loopback rule before Gloo's own
    assert ids.index("dcgm-health-xid") < ids.index("dcgm-health-incident")
    assert ids.index("connect-refused-loopback") < ids.index("gloo-peer-closed")
    assert ids.index("lustre-rpc-failed") < ids.index("python-exception")

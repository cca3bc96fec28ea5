"""Round-8b open-world vocabularies (hardware, fabric and storage state): nvidia-smi's clocks event
reasons (NVML's whole bitmask), NVLink link state (nvidia-smi nvlink -s, dcgmi's link-status grid,
NCCL's "P2P is disabled between NVLINK connected GPUs"), DCGM policy violations (every
dcgmPolicyCondition_t), Slingshot's Cassini return codes (every C_RC_*) and the CXI provider's flow
control, libfabric's error entries, IBM Storage Scale (GPFS) daemon messages and MMFS_* error-log
entries, lspci's link width, and a Fabric Manager that is not running in any tool's error wording.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence) -- each line alone
CASES = [
    # nvidia-smi -q: the hardware slows the GPU (a reading of its state: low alone)
    ("        HW Slowdown                       : Active", "nvsmi-clocks-hw-slowdown", "infra", "low"),
    ("            HW Power Brake Slowdown       : Active", "nvsmi-clocks-hw-slowdown", "infra", "low"),
    ("    HW Thermal Slowdown     : Active", "nvsmi-clocks-hw-slowdown", "infra", "low"),
    ("        SW Thermal Slowdown               : Active", "nvsmi-clocks-sw-thermal", "infra", "low"),
    # NVLink link state
    ("\t Link 7: <inactive>", "nvlink-link-inactive", "infra", "low"),
    ("NVML:Unable to retrieve NVLink information as all links are inActive", "nvlink-link-inactive", "infra", "low"),
    ("        U U U U D D U U U U U U", "dcgmi-nvlink-link-down", "infra", "low"),
    ("gpuId 4: U U U U U U U U U U U D _ _ _ _ _ _", "dcgmi-nvlink-link-down", "infra", "low"),
    ("P2P is disabled between NVLINK connected GPUs 5 and 4. This should not be the case given their "
     "connectivity, and is probably due to a hardware issue.", "nccl-p2p-disabled-nvlink", "infra", "low"),
    # DCGM policy: the memory conditions are the GPU's; the others say where to look
    ("The maximum number of retired pages has violated policy manager values.", "dcgm-policy-memory", "infra", "low"),
    ("NVLink Counter 60 has violated policy manager values.", "dcgm-policy-other", "infra", "low"),
    ("The maximum power limit has violated policy manager values.", "dcgm-policy-other", "infra", "low"),
    # an XID by DCGM policy is the XID's own entry (79: fallen off the bus)
    ("XID error 79 detected.", "dcgm-policy-xid", "infra", "high"),
    # Slingshot: the Cassini return code at the end of MPICH's OFI error decides
    ("MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:"
     "Input/output error - UNCOR_TRNSNT)", "cxi-rc-fabric-error", "infra", "medium"),
    ("libfabric:2211:1720001000::cxi:core:cxip_recv_req_report():311<warn> nid000777: RXC (0x9:0:0): "
     "Request error: 0x2f01c0 (err: 5, UNDELIVERABLE)", "cxi-rc-fabric-error", "infra", "medium"),
    ("MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:"
     "Input/output error - NO_SPACE)", "cxi-rc-resources", "job", "low"),
    ("MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:"
     "Input/output error - VNI_NOT_FOUND)", "cxi-rc-not-allowed", "job", "low"),
    ("libfabric:9001:1731000000::cxi:core:cxip_ux_onload_cb():2659<warn> nid000031: RXC (0x3:1) PtlTE 7:[Fatal] "
     "LE exhaustion during flow control, FI_CXI_RX_MATCH_MODE=[hybrid|software] is required",
     "cxi-flow-control-exhausted", "job", "low"),
    # IBM Storage Scale (GPFS)
    ("Thu Jul  3 11:02:41.770 2025: Lost membership in cluster lab.gpfs. Unmounting file systems.",
     "gpfs-file-system-lost", "infra", "medium"),
    ("Jul  3 11:02:42 cn-88 mmfs: Error=MMFS_FSSTRUCT, ID=0x94B1F045, Tag=118201: Invalid disk data structure.",
     "gpfs-error-log-fatal", "infra", "medium"),
    ("Jul  3 11:01:12 cn-88 mmfs: Error=MMFS_LONGDISKIO, ID=0x5A6D1E0B, Tag=118199: Long disk I/O detected.",
     "gpfs-error-log-other", "infra", "low"),
    ("2025-07-03_11:02:40.002+0200: [X] The disk lease of this node has expired.", "gpfs-critical-message",
     "infra", "low"),
    ("6027-650 [X] The mmfs daemon is shutting down abnormally.", "gpfs-critical-message", "infra", "low"),
    # lspci: lanes that did not train
    ("\t\tLnkSta:\tSpeed 32GT/s (ok), Width x8 (downgraded)", "pcie-link-width-downgraded", "infra", "low"),
    # the Fabric Manager is not running, in a tool's own error wording
    ("  what():  Error in burn.cu:120: system not yet initialized", "fabric-manager-down", "infra", "medium"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round8b_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # the driver keeping to its own limits is normal
        "        SW Power Cap                      : Active",
        "        Idle                              : Active",
        "        Applications Clocks Setting       : Active",
        "        HW Slowdown                       : Not Active",
        # an idle GPU's link drops its speed to save power; only lost lanes are read
        "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)",
        # links that are up, disabled or not supported
        "        U U U U U U U U U U U U _ _ _ _ _ _",
        "    gpuId 0:",
        "Key: Up=U, Down=D, Disabled=X, Not Supported=_",
        "\t Link 0: 25.781 GB/s",
        # a peer's endpoint that is gone is a consequence, never a cause
        "MPIDI_OFI_handle_cq_error(1075): OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:"
        "Input/output error - PTLTE_NOT_FOUND)",
        # a libfabric error entry's "Input/output error" is the network stack's, not a disk's
        "fi_cq_readerr: err: Input/output error (5) prov_errno: Unknown error -112 (-112) prov/rxr/src/rxr_cq.c:211",
        # GPFS notices and errors without a severe tag or known meaning
        "2025-07-03_11:02:40.002+0200: [N] Connecting to 10.2.0.5 nsd02 <c0n1>",
        "6027-1242 [E] GPFS is waiting for the quorum",
        # advisory CXI flow-control wording is not the fatal one
        "libfabric:1:2::cxi:core:cxip_recv_cb():10<warn> RXC (0x1:0:0): Flow control overflow no match, increasing "
        "FI_CXI_OFLOW_BUF_SIZE (current is 2097152B) may reduce occurrence",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown", line


def test_every_clocks_event_reason_is_in_exactly_one_entry() -> None:
    # NVML's bitmask as nvidia-smi -q names it: each reason is read, and by one entry only
    reasons = ["Idle", "Applications Clocks Setting", "SW Power Cap", "HW Slowdown", "HW Thermal Slowdown",
               "HW Power Brake Slowdown", "Sync Boost", "SW Thermal Slowdown", "Display Clock Setting"]
    members = [c for s in SIGNATURES if s.id.startswith("nvsmi-clocks-") for c in s.codes]
    assert sorted(members) == sorted(reasons)
    for reason in reasons:
        m = MATCHER.match_line(f"        {reason:<34}: Active")
        assert m is not None and m.signature.id.startswith("nvsmi-clocks-"), reason


def test_every_cassini_return_code_is_in_exactly_one_entry() -> None:
    # cassini_user_defs.h enum c_return_code (less C_RC_OK): no code read twice, none missing
    codes = ["NO_EVENT", "UNDELIVERABLE", "PT_DISABLED", "DROPPED", "PERM_VIOLATION", "OP_VIOLATION", "NO_MATCH",
             "UNCOR", "UNCOR_TRNSNT", "NO_SPACE", "ENTRY_NOT_FOUND", "NO_TARGET_CONN", "NO_TARGET_MST",
             "NO_TARGET_TRS", "SEQUENCE_ERROR", "NO_MATCHING_CONN", "INVALID_DFA_FORMAT", "VNI_NOT_FOUND",
             "PTLTE_NOT_FOUND", "PTLTE_SW_MANAGED", "SRC_ERROR", "MST_CANCELLED", "HRP_CONFIG_ERROR",
             "HRP_RSP_ERROR", "HRP_RSP_DISCARD", "INVALID_AC", "PAGE_PERM_ERROR", "ATS_ERROR", "NO_TRANSLATION",
             "PAGE_REQ_ERROR", "PCIE_ERROR_POISONED", "PCIE_UNSUCCESS_CMPL", "AMO_INVAL_OP_ERROR", "AMO_ALIGN_ERROR",
             "AMO_FP_INVALID", "AMO_FP_UNDERFLOW", "AMO_FP_OVERFLOW", "AMO_FP_INEXACT", "ILLEGAL_OP",
             "INVALID_ENDPOINT", "RESTRICTED_UNICAST", "CMD_ALIGN_ERROR", "CMD_INVALID_ARG", "INVALID_EVENT",
             "ADDR_OUT_OF_RANGE", "CONN_CLOSED", "CANCELED", "NO_MATCHING_TRS", "NO_MATCHING_MST", "DELAYED",
             "AMO_LENGTH_ERROR", "PKTBUF_ERROR", "RESOURCE_BUSY", "FLUSH_TRANSLATION", "TRS_PEND_RSP"]
    members = [c for s in SIGNATURES if s.id.startswith("cxi-rc-") for c in s.codes]
    assert sorted(members) == sorted(codes)


def test_every_policy_condition_is_read() -> None:
    # dcgmPolicyCondition_t as dcgmi policy --reg prints it
    lines = ["A double-bit ECC error has violated policy manager values.",
             "A PCIe replay event has violated policy manager values.",
             "The maximum number of retired pages has violated policy manager values.",
             "The maximum thermal limit has violated policy manager values.",
             "The maximum power limit has violated policy manager values.",
             "NVLink Counter 4 has violated policy manager values.",
             "An unknown error has violated policy manager values."]
    for line in lines:
        m = MATCHER.match_line(line)
        assert m is not None and m.signature.id in ("dcgm-policy-memory", "dcgm-policy-other"), line


def test_slow_gpu_reading_with_the_jobs_failure_keeps_its_confidence() -> None:
    # the state report alone is low; beside the job's own failure (a collective timeout) it
    # is the cause the failure points at
    text = (
        "ops@gpu-q4:~$ nvidia-smi -q -d PERFORMANCE\n"
        "        HW Slowdown                       : Active\n"
        "            HW Power Brake Slowdown       : Active\n"
        "[rank6]:[E] [PG ID 0 PG GUID 0(default_pg) Rank 6] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=88120, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.\n"
    )
    v = verdict_of(text, "gpu-q4.log")
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.signature.id == "nvsmi-clocks-hw-slowdown"
    assert v.root_cause.host == "gpu-q4"


def test_gpfs_unmount_outranks_the_stale_handle_it_causes() -> None:
    text = (
        "2025-07-03_11:02:41.770+0200: Lost membership in cluster lab.gpfs. Unmounting file systems.\n"
        "OSError: [Errno 116] Stale file handle: '/gpfs/lab/ckpt/step_9000/model.pt'\n"
    )
    v = verdict_of(text, "cn-88.log")
    assert v.category == "infra"
    assert v.root_cause is not None and v.root_cause.signature.id == "gpfs-file-system-lost"
    assert v.hosts == ()  # the storage or the network to it: nothing to drain


def test_cxi_undeliverable_is_read_before_the_generic_ofi_error() -> None:
    ids = [s.id for s in SIGNATURES]
    for specific in ("cxi-rc-fabric-error", "cxi-rc-peer-gone", "cxi-rc-resources", "cxi-rc-not-allowed"):
        assert ids.index(specific) < ids.index("mpich-ofi-cq-error")
    # a provider error text that is no Cassini code stays the generic symptom
    m = MATCHER.match_line("MPIDI_OFI_handle_cq_error(1075): OFI poll failed (ofi_events.c:1077:"
                           "MPIDI_OFI_handle_cq_error:Input/output error - local protection error)")
    assert m is not None and m.signature.id == "mpich-ofi-cq-error"


def test_new_signatures_record_their_source() -> None:
    new = [s for s in SIGNATURES if s.id.startswith(("nvsmi-clocks-", "nvlink-link-", "dcgmi-nvlink-", "dcgm-policy-",
                                                     "cxi-", "gpfs-", "pcie-link-width", "libfabric-error-entry",
                                                     "nccl-p2p-disabled"))]
    assert len(new) == 20
    for sig in new:
        assert sig.source, sig.id

"""Round-7b open-world vocabularies (hardware, fabric, storage, accelerators): Huawei Ascend's
CANN error codes, ACL runtime return codes and HCCL results; the mlx5 command interface
timing out; XFS/ext4 shutdowns on device-mapper names; the BMC's IPMI SEL events; the
habanalabs driver giving a Gaudi up; the NVIDIA modules not loading; ibstatus's sysfs port
states; the Cloud TPU node's health.

Lines written for this test in each producer's wording (its source or documentation, named in
the catalogs' ``source:``), labelled before running.
"""

from __future__ import annotations

import pytest

from tests.classify_helpers import MATCHER, SIGNATURES, line_verdict, verdict_of

# (line, signature, verdict category, verdict confidence); a symptom alone is unknown/low
CASES = [
    # ACL runtime return codes, in each of the shapes that carry them
    ("RuntimeError: NPU function error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is 507053",
     "acl-rt-device-memory-error", "infra", "high"),
    ("RuntimeError: ACL stream synchronize failed, error code:507054", "acl-rt-device-memory-error", "infra", "high"),
    ("[W302 10:01:02.000 NPUStream.cpp:577] Warning: NPU warning, error code is 507010[Error]: ",
     "acl-rt-device-lost", "infra", "medium"),
    ("        wait for compute device to finish failed, runtime result = 507056.[FUNC:ReportCallError]",
     "acl-rt-device-lost", "infra", "medium"),
    ("        alloc device memory failed, runtime result = 207018[FUNC:ReportCallError]", "acl-rt-out-of-memory",
     "job", "medium"),
    ("RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 207003", "acl-rt-overflow", "job",
     "medium"),
    ("[ERROR] aclrtSynchronizeStream(stream) failed: 507035 (main.cpp:92)", "acl-rt-kernel-exception", "job", "low"),
    ("RuntimeError: NPU function error: c10_npu::SetDevice(device_id_), error code is 107001", "acl-rt-usage-error",
     "job", "low"),
    ("        rtStreamSynchronize failed, runtime result = 507048[FUNC:ReportCallError]", "acl-rt-wait-or-internal",
     "unknown", "low"),
    # HcclResult through torch_npu
    ("RuntimeError: HcclAllReduce:ProcessGroupHCCL.cpp:120 HCCL function error: HcclAllReduce(a, b), error code is 24",
     "hccl-result-memory", "job", "medium"),
    ("RuntimeError: create_config:HCCLUtils.cpp:140 HCCL function error: hcclCommInitRootInfoConfig(n, &r, k, c, &h), "
     "error code is 1", "hccl-result-usage", "job", "low"),
    ("[rank3]: RuntimeError: InnerRunOpApi:OpParamMaker.cpp:281 OPS function error: HcclAllgather, error code is 9",
     "hccl-result-failed", "unknown", "low"),
    ("RuntimeError: ACL stream synchronize failed.", "torch-npu-call-failed", "unknown", "low"),
    ("RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64", "torch-npu-call-failed",
     "unknown", "low"),
    # CANN error codes: documented ones by meaning, in the old and the titled (CANN 8) shapes
    ("EI0001: 2026-01-02-03:04:05.678.901 Environment variable [HCCL_CONNECT_TIMEOUT] is invalid.",
     "cann-hccl-config", "job", "medium"),
    ("[PID: 77] 2026-01-02-03:04:05.678.901 Communication_Error_Bind_IP_Port(EJ0003): Failed to bind the IP port.",
     "cann-hccl-config", "job", "medium"),
    ("EJ0001: 2026-01-02-03:04:05.678.901 Failed to initialize the HCCP process. Reason: Maybe the last training "
     "process is running.", "cann-hccp-init-failed", "job", "medium"),
    ("[PID: 77] 2026-01-02-03:04:05.678.901 Memory_Allocation_Failure(EL0004): Failed to allocate memory.",
     "cann-device-out-of-memory", "job", "medium"),
    ("[PID: 77] 2026-01-02-03:04:05.678.901 Device_Absent/Abnormal(EL0001): Device not found or invalid.",
     "cann-device-absent", "infra", "medium"),
    ("EI0013: [PID: 77] 2026-01-02-03:04:05.678.901 Execution_Error_ROCE_CQE", "cann-hccl-link-error", "infra",
     "medium"),
    ("EL0005: [PID: 77] 2026-01-02-03:04:05.678.901 The resource is busy.", "cann-driver-usage", "job", "low"),
    ("[rank1]: EI0006: [PID: 77] 2026-01-02-03:04:05.678.901 Getting socket times out.", "cann-peer-or-wait",
     "unknown", "low"),
    # ... and any other code by its class
    ("EZ9999: Inner Error!", "cann-internal-error", "unknown", "low"),
    ("EZ9999[PID: 77] 2026-01-02-03:04:05.678.901 (EZ9999):  The error from device(chipId:0, dieId:0)",
     "cann-internal-error", "unknown", "low"),
    ("EZ1001: [PID: 77] 2026-01-02-03:04:05.678.901 The input shape is invalid.", "cann-user-error", "job", "low"),
    # the ConnectX command interface
    ("n7: [812.0] mlx5_core 0000:61:00.0: wait_func_handle_exec_timeout:1104:(pid 9): cmd[2]: CREATE_DCT(0x710) "
     "No done completion", "mlx5-cmd-timeout", "infra", "medium"),
    ("mlx5_core 0000:01:00.1: wait_func:1132:(pid 9): ACCESS_REG(0x805) timeout. Will cause a leak of a command "
     "resource", "mlx5-cmd-timeout", "infra", "medium"),
    # filesystems on dashed device names, and XFS shutdowns
    ("kernel: XFS (dm-4): I/O Error Detected. Shutting down filesystem", "block-io-error", "infra", "medium"),
    ("kernel: XFS (sdb6): log I/O error -5", "block-io-error", "infra", "medium"),
    ("kernel: XFS (dm-4): Corruption detected. Unmount and run xfs_repair", "block-io-error", "infra", "medium"),
    ("[1.0] EXT4-fs error (device dm-25): ext4_journal_check_start:56: Detected aborted journal", "block-io-error",
     "infra", "medium"),
    ("[1.0] EXT4-fs (dm-25): Remounting filesystem read-only", "block-io-error", "infra", "medium"),
    ("[1.0] Buffer I/O error on dev dm-2, logical block 0, lost sync page write", "block-io-error", "infra", "medium"),
    ("[1.0] XFS (dm-0): xfs_log_force: error -5 returned.", "xfs-log-force-error", "unknown", "low"),
    # the BMC's event log
    ("   1 | 04/13/2025 | 03:08:16 | Critical Interrupt #0xa1 | PCI SERR | Asserted", "ipmi-sel-hardware-fault",
     "infra", "medium"),
    (" 36   | 04/13/2025, 03:08:16 | BIOS | Critical Interrupt     | Bus Fatal Error - Asserted",
     "ipmi-sel-hardware-fault", "infra", "medium"),
    ("  89 | 08/31/2016 | 06:20:30 | Processor #0xc9 | IERR | Asserted", "ipmi-sel-hardware-fault", "infra", "medium"),
    ("  3a | 12/14/22 | 23:09:44 CET | Memory #0x88 | Correctable ECC (CPU0_G1) | Asserted", "ipmi-sel-warning",
     "unknown", "low"),
    # Gaudi, the NVIDIA driver
    ("[73.0] habanalabs 0000:1a:00.0: Failed to initialize hl2. Device is NOT usable !", "habanalabs-device-unusable",
     "infra", "medium"),
    ("(udev-worker)[9]: nvidia: Process '/sbin/modprobe nvidia-drm' failed with exit code 1.",
     "nvidia-module-load-failed", "infra", "medium"),
    ("systemd[1]: nvidia-persistenced.service: Failed with result 'exit-code'.", "nvidia-unit-failed", "unknown",
     "low"),
    # RDMA ports as ibstatus prints the sysfs files
    ("\tstate:\t\t 1: DOWN", "sysfs-port-down", "infra", "low"),
    ("\tphys state:\t 2: Polling", "sysfs-port-down", "infra", "low"),
    ("\tstate:\t\t 2: INIT", "sysfs-port-not-active", "infra", "low"),
    # the Cloud TPU node
    # a reading of the node alone decides at low (state_report)
    ("health: UNHEALTHY_MAINTENANCE", "tpu-node-maintenance", "preemption", "low"),
    (" 'health': 'TIMEOUT',", "tpu-node-unhealthy", "infra", "low"),
    ("RuntimeError: TPU node-v3-32 is not HEALTHY yet. Re-run when all TPUs are HEALTHY", "tpu-pod-not-healthy",
     "unknown", "low"),
]


@pytest.mark.parametrize(("line", "sig_id", "category", "confidence"), CASES)
def test_round7b_lines(line: str, sig_id: str, category: str, confidence: str) -> None:
    v = line_verdict(line, sig_id)
    assert (v.category, v.confidence) == (category, confidence)


@pytest.mark.parametrize(
    "line",
    [
        # healthy states say nothing failed
        "\tstate:\t\t 4: ACTIVE",
        "\tphys state:\t 5: LinkUp",
        "health: HEALTHY",
        "   7 | 04/13/2025 | 03:01:02 | Power Supply #0x51 | Presence detected | Asserted",
        # a deasserted SEL event is the fault going away
        "   8 | 04/13/2025 | 03:01:09 | Critical Interrupt #0xa1 | PCI SERR | Deasserted",
        # a word that looks like a CANN code without its shape, and a pylint-style code
        "checked EI0006 in the runbook yesterday",
        "train.py:10:0: E1101: Instance of 'Foo' has no 'bar' member (no-member)",
        # an error code number that is not an ACL runtime code
        "curl failed, error code is 7",
    ],
)
def test_non_failures_make_no_cause(line: str) -> None:
    v = verdict_of(line + "\n")
    assert v.category == "unknown"
    assert not v.causes


def test_cann_code_outranks_the_generic_python_exception() -> None:
    # torch_npu raises RuntimeError; the code it carries decides, not the exception rule
    text = (
        "[rank0]: RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64\n"
        "[rank0]: [ERROR] 2026-01-02-03:04:05 (PID:4120, Device:0, RankID:0) ERR02200 DIST call hccl api failed.\n"
        "[rank0]: EJ0001: 2026-01-02-03:04:05.678.901 Failed to initialize the HCCP process. Reason: Maybe the last "
        "training process is running.\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("job", "medium")
    assert v.root_cause is not None and v.root_cause.signature.id == "cann-hccp-init-failed"


def test_device_memory_error_outranks_the_wait_that_reported_it() -> None:
    text = (
        "EH9999: Inner Error!\n"
        "        wait for compute device to finish failed, runtime result = 507053.[FUNC:ReportCallError]\n"
        "RuntimeError: ACL stream synchronize failed.\n"
    )
    v = verdict_of(text)
    assert (v.category, v.confidence) == ("infra", "high")
    assert v.root_cause is not None and v.root_cause.signature.id == "acl-rt-device-memory-error"


def test_mlx5_command_timeout_names_the_host_of_its_prefix() -> None:
    text = (
        "b1360: [14280.445220] mlx5_core 0000:61:00.0: wait_func_handle_exec_timeout:1104:(pid 141183): cmd[22]: "
        "CREATE_DCT(0x710) No done completion\n"
    )
    v = verdict_of(text, "dmesg.txt")
    assert v.category == "infra"
    assert "b1360" in v.hosts


def test_xfs_log_force_repeat_is_not_a_cause_alone() -> None:
    v = verdict_of("[39648.1] XFS (dm-0): xfs_log_force: error -5 returned.\n" * 3, "dmesg.txt")
    assert v.category == "unknown"
    # with the shutdown line it explains, the shutdown decides
    v = verdict_of("[39600.0] XFS (dm-0): Filesystem has been shut down due to log error (0x2).\n"
                   "[39648.1] XFS (dm-0): xfs_log_force: error -5 returned.\n", "dmesg.txt")
    assert v.root_cause is not None and v.root_cause.signature.id == "block-io-error"


def _codes(prefix: str) -> list[str]:
    return [c for s in SIGNATURES if s.id.startswith(prefix) for c in s.codes]


def test_acl_runtime_table_is_whole() -> None:
    # every ACL_ERROR_RT_* of rt_error_codes.h is in exactly one entry
    table = [*range(107000, 107037), *range(207000, 207020), *range(507000, 507058), *range(507899, 507905),
             *range(574006, 574010)]
    members = _codes("acl-rt-")
    assert sorted(members) == sorted(str(n) for n in table)


def test_hccl_result_table_is_whole() -> None:
    assert sorted(_codes("hccl-result-"), key=int) == [str(n) for n in range(1, 25)]


def test_documented_cann_codes_are_whole() -> None:
    members = _codes("cann-")
    assert len(members) == len(set(members))
    assert {f"EI{n:04d}" for n in range(1, 21)} <= set(members)
    assert {f"EL{n:04d}" for n in range(1, 16)} <= set(members)
    assert {"EJ0001", "EJ0003"} <= set(members)


def test_ipmi_sel_hardware_types_are_whole() -> None:
    # the event texts of the hardware sensor types of ipmitool's sensor_specific_event_types
    table = {
        "IERR", "Thermal Trip", "FRB1/BIST failure", "FRB2/Hang in POST failure", "FRB3/Processor startup/init failure",
        "Configuration Error", "SM BIOS Uncorrectable CPU-complex Error", "Presence detected", "Disabled",
        "Terminator presence detected", "Throttled", "Uncorrectable machine check exception",
        "Correctable machine check error", "Failure detected", "Predictive failure", "Power Supply AC lost",
        "AC lost or out-of-range", "AC out-of-range, but present", "Config Error: Vendor Mismatch",
        "Config Error: Revision Mismatch", "Config Error: Processor Missing", "Config Error: Power Supply Rating Mismatch",
        "Config Error: Voltage Rating Mismatch", "Config Error", "Power Supply Inactive", "Power off/down", "Power cycle",
        "240VA power down", "Interlock power down", "AC lost", "Soft-power control failure", "Correctable ECC",
        "Uncorrectable ECC", "Parity", "Memory Scrub Failed", "Memory Device Disabled",
        "Correctable ECC logging limit reached", "Presence Detected", "Spare", "Critical Overtemperature",
        "System Reconfigured", "OEM System boot event", "Undetermined system hardware failure",
        "Entry added to auxiliary log", "PEF Action", "Timestamp Clock Sync", "NMI/Diag Interrupt", "Bus Timeout",
        "I/O Channel check NMI", "Software NMI", "PCI PERR", "PCI SERR", "EISA failsafe timeout",
        "Bus Correctable error", "Bus Uncorrectable error", "Fatal NMI", "Bus Fatal Error", "Bus Degraded",
        "Soft Power Control Failure",
    }
    members = _codes("ipmi-sel-")
    assert len(members) == len(set(members))
    assert table <= set(members)


def test_new_signatures_record_their_source() -> None:
    ids = [s.id for s in SIGNATURES]
    for sig_id in ("acl-rt-device-memory-error", "acl-rt-device-lost", "acl-rt-out-of-memory", "acl-rt-overflow",
                   "acl-rt-kernel-exception", "acl-rt-usage-error", "acl-rt-wait-or-internal", "hccl-result-memory",
                   "hccl-result-usage", "hccl-result-failed", "torch-npu-call-failed", "cann-hccl-config",
                   "cann-hccp-init-failed", "cann-device-out-of-memory", "cann-device-absent", "cann-hccl-link-error",
                   "cann-driver-usage", "cann-peer-or-wait", "cann-internal-error", "cann-user-error",
                   "mlx5-cmd-timeout", "xfs-log-force-error", "ipmi-sel-hardware-fault", "ipmi-sel-warning",
                   "ipmi-sel-benign", "nvidia-module-load-failed", "nvidia-unit-failed", "habanalabs-device-unusable",
                   "sysfs-port-down", "sysfs-port-not-active", "sysfs-port-benign", "tpu-node-maintenance",
                   "tpu-node-unhealthy", "tpu-node-healthy", "tpu-pod-not-healthy"):
        sig = SIGNATURES[ids.index(sig_id)]
        assert sig.source
    # the specific CANN codes come before the class fallbacks that would also match them
    assert ids.index("cann-peer-or-wait") < ids.index("cann-user-error")
    assert ids.index("acl-rt-kernel-exception") < ids.index("torch-npu-call-failed")
    m = MATCHER.match_line("RuntimeError: ACL stream synchronize failed, error code:507015")
    assert m is not None and m.signature.id == "acl-rt-kernel-exception"

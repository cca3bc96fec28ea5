"""``attribute_line``: one example line per shape, in the formats the real tools print.

The lines are written here after the tools' sources and docs (NCCL's logger prefix
``host:pid:tid [cudaDev] file:line NCCL WARN``, torchrun's ``[{role}{local_rank}]:``
tee prefix and failure table, Open MPI's ``--tag-output``, Slurm's srun and
slurmstepd messages, journald/syslog/dmesg prefixes, kubectl output).
"""

from __future__ import annotations

from typing import Any

import pytest

from ckptctl.core.classify.attribution import SHAPES, attribute_line
from ckptctl.core.classify.catalog import EVENT_GROUPS

# (shape that must give the host or the first field, line, expected fields)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("syslog", "Mar 02 04:11:09 gpu-a07 kernel: NVRM: Xid (PCI:0000:9d:00): 79, pid=881, name=python, GPU has fallen off the bus.",
     {"host": "gpu-a07", "gpu": "0000:9d:00", "time": "Mar 02 04:11:09"}),
    ("syslog", "2025-01-19T11:02:13.114500+00:00 h100-node-4 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=91022, name=python, DBE",
     {"host": "h100-node-4", "gpu": "0000:18:00", "time": "2025-01-19T11:02:13.114500+00:00"}),
    ("syslog", "Mar 02 04:11:12 gpu-a07 nv-hostengine[2210]: Detected XID error", {"host": "gpu-a07", "program": "nv-hostengine"}),
    ("syslog", "<3>Jan  7 08:14:55 node17 kernel: NVRM: Xid (PCI:0000:cb:00): 94, pid=58120, name=python3, Contained: SM (0x1).",
     {"host": "node17", "gpu": "0000:cb:00"}),
    ("dmesg-T", "[Sun Mar  2 04:47:19 2025] NVRM: Xid (PCI:0000:41:00): 79, pid=226571, name=python3, GPU has fallen off the bus.",
     {"host": None, "gpu": "0000:41:00", "time": "Sun Mar  2 04:47:19 2025"}),
    ("dmesg", "[88412.004118] NVRM: Xid (PCI:0000:4e:00): 95, pid=1188210, name=python, Uncontained: FBHUB.",
     {"host": None, "gpu": "0000:4e:00", "time": "88412.004118"}),
    ("nccl", "gpu-d01:31201:31377 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.3.14<57216> with status=12",
     {"host": "gpu-d01", "gpu_index": 3, "peer": "10.20.3.14", "pid": 31201}),
    ("nccl", "ip-10-1-44-17:18221:18441 [6] nccl_ofi_rdma.c:5983 NCCL WARN NET/OFI Request 0x7f31a40c2e08 completed with error.",
     {"host": "ip-10-1-44-17", "gpu_index": 6}),
    ("nccl", "dgx12:4410:4540 [0] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 32768, vendor err 129",
     {"host": "dgx12", "gpu_index": 0}),
    ("nccl", "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
     {"host": "...-48", "gpu_index": 0}),  # a host redacted by whoever posted the log
    ("nccl", "> node201:127799:127863 [0] transport/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN NET/IB : mlx5_0:1 Got async event : port error",
     {"host": "node201", "gpu_index": 0}),  # quoted and auto-linked by a markdown renderer
    ("ucx", "[1712345678.123456] [gpu-a12:12345:0]      ib_mlx5_log.c:179  UCX  ERROR Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
     {"host": "gpu-a12", "pid": 12345}),
    ("ucx-proc", "[gpu-a12:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
     {"host": "gpu-a12", "pid": 19546}),
    ("efa-host-id", "NCCL WARN NET/OFI Request 0x7f1 (SEND) completed with error: err: 5, flags: 0, prov_errno: 4124, strerror: Unresponsive receiver (connection previously established) My EFA addr: fi_addr_efa://[fe80::1]:0:1 My host id: i-0a1b2c3d4e5f60718 Peer EFA addr: fi_addr_efa://[fe80::2]:0:1 Peer host id: i-0f9e8d7c6b5a40312, len: 0",
     {"host": "i-0a1b2c3d4e5f60718", "peer": "i-0f9e8d7c6b5a40312"}),
    ("efa-peer-host-id", "Unreachable remote - never received a response My EFA addr: fi_addr_efa://[fe80::1]:0:1 My host id: N/A Peer EFA addr: fi_addr_efa://[fe80::2]:0:1 Peer host id: i-0f9e8d7c6b5a40312",
     {"host": None, "peer": "i-0f9e8d7c6b5a40312"}),
    ("instance-id", '{"instance-id": "i-0f1e2d3c4b5a69788", "detail-type": "EC2 Spot Instance Interruption Warning"}',
     {"host": "i-0f1e2d3c4b5a69788"}),
    ("ray-node-name", "2025-03-02 04:11:09,741 WARNING worker.py:1866 -- The node with node id: 9426f44574cce486 and address: 10.130.0.113 and node name: gpu-r3 has been marked dead because the detector has missed too many heartbeats from it.",
     {"host": "gpu-r3"}),
    ("ray-node-ip", "2026-03-09 22:41:07,512\tWARNING worker.py:1441 -- The node with node id: 6d1a0f3e9b2c4857 and ip: 10.55.0.9 has been marked dead because the detector has missed too many heartbeats from it.",
     {"host": "10.55.0.9"}),
    ("ray-task-node-ip", "ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead or unavailable. Node IP: 10.0.3.41, node ID: e55b8ca03ebf3f74.",
     {"host": "10.0.3.41"}),
    ("ray-owner-ip", "The actor is dead because its owner has died. Owner Id: 01000000ffff Owner Ip address: 10.0.3.17 Owner worker exit type: SYSTEM_ERROR Worker exit detail: Owner's node has crashed.",
     {"host": "10.0.3.17"}),
    ("ray-ip", "(raylet, ip=10.0.0.7) [2025-03-02 04:11:09,741 E 395 395] (raylet) node_manager.cc:3049: 1 Workers (tasks / actors) killed due to memory pressure (OOM)",
     {"host": "10.0.0.7"}),
    ("pdsh", "gpu-e4: [rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a total capacity of 79.10 GiB",
     {"host": "gpu-e4", "rank": 11, "gpu_index": 3}),
    ("mpirun-tag", "[1,5]<stderr>:Traceback (most recent call last):", {"rank": 5, "host": None}),
    ("openmpi-proc", "[1,5]<stderr>:[gpu-f2:22871] *** Process received signal ***", {"host": "gpu-f2", "rank": 5, "pid": 22871}),
    ("mpirun-noticed", "mpirun noticed that process rank 5 with PID 22871 on node gpu-f2 exited on signal 11 (Segmentation fault).",
     {"host": "gpu-f2", "rank": 5}),
    ("torchrun-tee", "[default5]:KeyError: 'attention_mask'", {"local_rank": 5, "rank": None}),
    ("torch-rank", "[default0]:[rank0]:[E302 04:21:11.331870412 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout",
     {"local_rank": 0, "rank": 0, "time": "302 04:21:11.331870412"}),
    ("torch-rank", "[rank: 1] Received SIGTERM: 15", {"rank": 1}),
    ("torch-rank", "[rank2]:[E1121 03:32:45.0 ProcessGroupNCCL.cpp:1375] [PG ID 0 PG GUID 0(default_pg) Rank 2] Heartbeat monitor timed out!",
     {"rank": 2}),
    ("srun-task", "srun: error: gpu-v2: task 3: Exited with exit code 1", {"host": "gpu-v2", "rank": 3}),
    ("srun-node", "srun: error: Node failure on gpu-c07", {"host": "gpu-c07"}),
    ("srun-node", "salloc: error: Node failure on gpu-c08", {"host": "gpu-c08"}),
    ("slurmstepd", "slurmstepd: error: *** JOB 81234 ON gpu-c01 CANCELLED AT 2025-03-02T04:11:09 DUE TO PREEMPTION ***",
     {"host": "gpu-c01", "time": "2025-03-02T04:11:09"}),
    ("srun-label", "3: IndexError: list index out of range", {"rank": 3}),
    ("torchrun-record-flat", "  | 2026-03-02T04:11:09.118Z | [5]: time : 2026-03-02_04:11:09 host : algo-3 rank : 13 (local_rank: 5) exitcode : -6 (pid: 4410) error_file: <N/A> traceback : Signal 6 (SIGABRT) received by PID 4410",
     {"host": "algo-3", "rank": 13, "local_rank": 5}),
    ("torchrun-table-host", "  host      : gpu-a01.hpc.example.net", {"host": "gpu-a01"}),
    ("torchrun-table-rank", "  rank      : 3 (local_rank: 3)", {"rank": 3, "local_rank": 3}),
    ("torchrun-table-exitcode", "  exitcode  : -9 (pid: 140233)", {"pid": 140233}),
    ("torchrun-agent", "E0412 11:40:02.004000 140118 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 140233) of binary: /usr/bin/python3",
     {"local_rank": 1, "pid": 140233, "time": "0412 11:40:02.004000"}),
    ("k8s-node", "11m   Warning   OOMKilling   node/gpu-pool-b-3   Memory cgroup out of memory: Killed process 220911 (python)",
     {"host": "gpu-pool-b-3"}),
    ("k8s-pod", "2m    Normal    Killing      pod/trainer-0       Stopping container pytorch", {"pod": "trainer-0"}),
    ("k8s-describe-node", "Node:             gke-a3-pool-spot-9f1c2a3b-xk2p/10.128.0.41", {"host": "gke-a3-pool-spot-9f1c2a3b-xk2p"}),
    ("k8s-describe-name", "Name:             llm-trainer-worker-3", {"pod": "llm-trainer-worker-3"}),
    ("node-name-field", "2025/06/02 14:41:04 INF Requesting instance drain kind=SPOT_ITN node-name=ip-10-1-44-17.ec2.internal",
     {"host": "ip-10-1-44-17"}),
    ("shell-prompt", "ops@gpu-b07:~$ nvidia-smi", {"host": "gpu-b07"}),
    ("shell-prompt", "[root@gpu-b07 ~]# dmesg -T | grep -i xid", {"host": "gpu-b07"}),
    ("shell-prompt", "ops@gpu-b07 ~ % nvidia-smi", {"host": "gpu-b07"}),  # zsh
    ("reverse-dns", "22.4.1.10.in-addr.arpa domain name pointer gpu-d09.cluster.internal.",
     {"peer": "10.1.4.22", "peer_host": "gpu-d09", "host": None}),
    ("hosts-file", "10.1.4.22       gpu-d09.cluster.internal gpu-d09", {"peer": "10.1.4.22", "peer_host": "gpu-d09"}),
    ("text-node", "[rank3]: AssertionError: Rank 3: found NaN in local grad norm. Device: 3, node: gpu-g05",
     {"host": "gpu-g05", "rank": 3, "gpu_index": 3}),
    ("peer", "[default0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:53001",
     {"peer": "10.0.0.3", "host": None}),
    ("peer", "gpu-m05:1901:1950 [5] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.16.4.9<39711> failed : No route to host",
     {"host": "gpu-m05", "peer": "172.16.4.9"}),
    ("peer", "[rank0]: socketProgress: Connection closed by remote peer gpu-u7.cluster<48223>", {"peer": "gpu-u7", "rank": 0}),
    ("xid-cause", "Mar 02 04:11:10 gpu-a07 kernel: NVRM: Xid (PCI:0000:9d:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required) due to Xid 79",
     {"cause_xid": 79, "gpu": "0000:9d:00", "host": "gpu-a07"}),
    ("pci", "Feb 11 22:05:42 gpu-c11 kernel: NVRM: The NVIDIA GPU 0000:ca:00.0 (PCI ID: 10de:2330)", {"gpu": "0000:ca:00", "host": "gpu-c11"}),
    ("pci", "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", {"gpu": "0000:3b:00"}),
    ("pci", "[Mon Nov 23 18:02:13 2026] amdgpu 0000:29:00.0: amdgpu: Ring comp_1.2.0 reset failed", {"gpu": "0000:29:00", "host": None}),
    ("gpu-index", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.30 GiB. GPU 1 has a total capacity of 79.15 GiB",
     {"gpu_index": 1}),
    ("glog-time", "W0302 04:21:13.118000 8871 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 8901 closing signal SIGTERM",
     {"time": "0302 04:21:13.118000"}),
    ("iso-time", "[2025-02-07 18:22:40,007] [INFO] [logging.py:128:log_dist] [Rank 0] step=120, skipped=0", {"time": "2025-02-07 18:22:40,007", "rank": 0}),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "line", "expected"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_attribute_line(shape: str, line: str, expected: dict[str, Any]) -> None:
    got = attribute_line(line)
    for key, value in expected.items():
        assert getattr(got, key) == value, (key, got)
    assert shape in got.shapes


def test_every_shape_has_an_example() -> None:
    assert {name for name, _ in SHAPES} <= {shape for shape, _, _ in CASES}


@pytest.mark.parametrize(
    "line",
    [
        "[rank9]:[E302 04:21:11.331 ProcessGroupNCCL.cpp:632] [Rank 9] Watchdog caught collective operation timeout",
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
        "[socket.cpp:1017] [c10d] The client socket has timed out after 600000ms",
        "Oct 02 10:14:01 [REDACTED] kernel: NVRM: Xid (PCI:0000:86:00): 79, pid=4411, name=python, GPU has fallen off the bus.",
        "ValueError: too many values to unpack (expected 2)",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4412937.0.",
        "step12: loss 2.0",
        "ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead or unavailable. Node IP: 127.0.0.1, node ID: e55b8c",
    ],
)
def test_lines_that_name_no_host(line: str) -> None:
    """Source files, redacted hosts, log words in a host slot are not hosts."""
    assert attribute_line(line).host is None


def test_fields_use_signature_group_names() -> None:
    got = attribute_line("gpu-d01:31201:31377 [3] transport/net_ib.cc:1696 NCCL WARN x from peer 10.20.3.14<57216>")
    assert got.fields() == {"host": "gpu-d01", "gpu_index": "3", "peer": "10.20.3.14", "pid": "31201"}
    assert set(got.fields()) <= EVENT_GROUPS | {"peer_host"}

"""This node's ephemeral port range (``/proc/sys/net/ipv4/ip_local_port_range``).

The kernel hands these ports to every automatic bind and outgoing connection. A rendezvous
port inside the range can be taken between the moment it is chosen and the moment torchrun
binds it; torchrun then fails to host its store there, joins whatever socket holds the port
as a client and waits (seen with srun's own automatic bind). ``launch`` warns about it.
"""

from __future__ import annotations

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_port_range(path: str = RANGE_FILE) -> tuple[int, int] | None:
    """``(low, high)``, or ``None`` where the file is absent or unreadable (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.read(64).split()
        low, high = int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
    return (low, high) if 0 < low <= high <= 65535 else None

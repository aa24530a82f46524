"""``pydoca bench``: the perftest of pydoca.

Every measurement runs this process as the initiator against a target
process it starts itself on loopback (``python -m pydoca.perftest.target``),
connected out of band, so both ends are real processes with their own
engines. Sub-commands (see :mod:`pydoca.perftest.cli`):

* ``lat``: one operation at a time; p50/p99 of its completion (a full round trip);
* ``bw``: ``--outstanding`` operations kept in flight; MB/s (10^6 bytes/s);
* ``rate``: the same with small messages; operations/s and the submitting
  thread's CPU time per task;
* ``peer``: the requester/responder layer against raw RDMA in the same run;
* ``compare``: the matrix plus the peers found on PATH (iperf3, ucx_perftest)
  and Python sockets, in interleaved rounds, as ratios;
* ``summary``: the older one-screen comparison with TCP.

Each figure is the median over ``--rounds`` rounds, with its spread.
"""
from __future__ import annotations

OPS = ("write", "read", "send", "write_imm", "send_imm", "fetch_add", "compare_swap")
TWO_SIDED = ("send", "send_imm", "write_imm")
ATOMIC = ("fetch_add", "compare_swap")

__all__ = ["ATOMIC", "OPS", "TWO_SIDED"]

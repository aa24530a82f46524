"""The DOCA RDMA task types pydoca configures: the one list (read by _build.py to generate the
C shims of shim.c, and by pydoca.rdma to configure each type)."""
TASK_TYPES = ("receive", "send", "send_imm", "read", "write", "write_imm", "atomic_cmp_swp", "atomic_fetch_add",
              "remote_net_sync_event_get", "remote_net_sync_event_notify_set", "remote_net_sync_event_notify_add")
#: The remote-net sync-event task types: configured only where the device supports them.
SYNC_EVENT_TASK_TYPES = TASK_TYPES[8:]

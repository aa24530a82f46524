"""cffi builder for ``pydoca._native._doca_cffi`` (API mode, out of line).

The module is compiled against cdefs/ but linked against no DOCA library: its
DOCA calls resolve at import time against whichever backend the loader put in
the global symbol scope (real DOCA or softdoca). DOCA callbacks take
``union doca_data`` by value, which libffi cannot express, so small C shims
here receive them and forward plain integers to ``extern "Python"`` handlers.
"""
from __future__ import annotations

import os

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CDEFS = os.path.join(ROOT, "cdefs")

TASKS = ("receive", "send", "send_imm", "read", "write", "write_imm", "atomic_cmp_swp", "atomic_fetch_add")


def read_cdefs() -> str:
    """The cdefs files joined in their explicit order (cdefs/ORDER)."""
    with open(os.path.join(CDEFS, "ORDER")) as fh:
        names = [n.strip() for n in fh if n.strip() and not n.startswith("#")]
    parts = []
    for name in names:
        with open(os.path.join(CDEFS, name)) as fh:
            parts.append(fh.read())
    return "\n".join(parts)


SHIM_CDEF = """
extern "Python" void _pydoca_task_done(struct doca_task *task, uint64_t task_ud, int success);
extern "Python" void _pydoca_ctx_state(uint64_t ctx_ud, struct doca_ctx *ctx, int prev, int next);
extern "Python" void _pydoca_conn_event(int kind, struct doca_rdma_connection *conn, uint64_t conn_ud, uint64_t ctx_ud);
doca_error_t pydoca_ctx_set_state_cb(struct doca_ctx *ctx);
doca_error_t pydoca_rdma_set_conn_cbs(struct doca_rdma *rdma);
uint64_t pydoca_task_get_user_data(const struct doca_task *task);
""" + "".join(
    f"doca_error_t pydoca_rdma_task_{t}_set_conf(struct doca_rdma *rdma, uint32_t num_tasks);\n" for t in TASKS)

SHIM_C = r"""
#include "doca_all.h"

static void _pydoca_task_done(struct doca_task *task, uint64_t task_ud, int success);
static void _pydoca_ctx_state(uint64_t ctx_ud, struct doca_ctx *ctx, int prev, int next);
static void _pydoca_conn_event(int kind, struct doca_rdma_connection *conn, uint64_t conn_ud, uint64_t ctx_ud);

static void pydoca_state_shim(const union doca_data ud, struct doca_ctx *ctx,
                              enum doca_ctx_states prev, enum doca_ctx_states next)
{
    _pydoca_ctx_state(ud.u64, ctx, (int)prev, (int)next);
}

doca_error_t pydoca_ctx_set_state_cb(struct doca_ctx *ctx)
{
    return doca_ctx_set_state_changed_cb(ctx, pydoca_state_shim);
}

uint64_t pydoca_task_get_user_data(const struct doca_task *task)
{
    return doca_task_get_user_data(task).u64;
}

static void pydoca_conn_request(struct doca_rdma_connection *c, union doca_data cu)
{ _pydoca_conn_event(0, c, 0, cu.u64); }
static void pydoca_conn_established(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(1, c, u.u64, cu.u64); }
static void pydoca_conn_failure(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(2, c, u.u64, cu.u64); }
static void pydoca_conn_disconnect(struct doca_rdma_connection *c, union doca_data u, union doca_data cu)
{ _pydoca_conn_event(3, c, u.u64, cu.u64); }

doca_error_t pydoca_rdma_set_conn_cbs(struct doca_rdma *rdma)
{
    return doca_rdma_set_connection_state_callbacks(rdma, pydoca_conn_request, pydoca_conn_established,
                                                    pydoca_conn_failure, pydoca_conn_disconnect);
}

#define PYDOCA_TASK_SHIM(T)                                                                         \
static void pydoca_##T##_ok(struct doca_rdma_task_##T *t, union doca_data u, union doca_data cu)    \
{ (void)cu; _pydoca_task_done(doca_rdma_task_##T##_as_task(t), u.u64, 1); }                          \
static void pydoca_##T##_err(struct doca_rdma_task_##T *t, union doca_data u, union doca_data cu)   \
{ (void)cu; _pydoca_task_done(doca_rdma_task_##T##_as_task(t), u.u64, 0); }                          \
doca_error_t pydoca_rdma_task_##T##_set_conf(struct doca_rdma *rdma, uint32_t num_tasks)             \
{ return doca_rdma_task_##T##_set_conf(rdma, pydoca_##T##_ok, pydoca_##T##_err, num_tasks); }
""" + "".join(f"PYDOCA_TASK_SHIM({t})\n" for t in TASKS)

ffibuilder = FFI()
ffibuilder.cdef(read_cdefs() + SHIM_CDEF)
ffibuilder.set_source(
    "pydoca._native._doca_cffi",
    SHIM_C,
    include_dirs=[os.path.join(ROOT, "softdoca", "include"), CDEFS],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wno-unused-function", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)

/* Types shared by shim.c and cffi (plain C, no preprocessor lines: cffi parses this file). */
/* Single tasks: the keys of those that succeeded, recorded in C on the completing thread. */
struct pydoca_done_view {
	const uint64_t *ids;
	uint32_t n;
};
/* Task batches: completions are counted in C, no Python call per task. */
struct pydoca_batch {
	uint32_t n;
	uint32_t submitted;
	uint32_t done;
	uint32_t failed;
	int32_t *status;
	char first_error[256];   /* softdoca's detail of the first failed task ("" when none or real DOCA) */
};
struct pydoca_batch_slot {
	struct pydoca_batch *batch;
	uint32_t index;
	uint32_t pad;
	struct doca_buf *a;      /* buffers a range batch took from its inventory (released on completion) */
	struct doca_buf *b;
};
/* Task rings: n slots (one doca_buf each) whose receive or send tasks are allocated and submitted
   in one call each, and whose completions are recorded here, in order, for Python to drain in bulk:
   no Python object and no Python call per task. */
struct pydoca_ring;
struct pydoca_ring_entry {
	uint32_t slot;
	int32_t status;          /* 0, or the doca_error_t of a failed task */
	uint32_t length;         /* receive: bytes received */
	uint32_t opcode;         /* receive: enum doca_rdma_opcode */
	uint32_t imm;            /* receive with immediate: as DOCA gives it (big endian) */
	uint32_t pad;
	uint64_t conn_ud;        /* receive: user data of the sending connection (0: unknown) */
};
struct pydoca_ring_slot {
	struct pydoca_ring *ring;
	struct doca_buf *buf;
	struct doca_rdma_task_receive *recv;   /* the receive in flight (receive rings) */
	uint32_t index;
	uint32_t posted;
};
struct pydoca_ring {
	uint32_t n;
	uint32_t posted;         /* tasks in flight */
	uint64_t head;           /* completions recorded (entries[head % n] is the next one written); never wraps */
	uint64_t tail;           /* completions taken by the owner */
	uint64_t failed;         /* tasks that completed with an error, in all */
	int32_t kind;            /* 0: receive, 1: send */
	uint32_t pad;
	struct pydoca_ring_entry *entries;
	struct pydoca_ring_slot *slots;
};

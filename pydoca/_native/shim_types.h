/* Types shared by shim.c and cffi (plain C, no preprocessor lines: cffi parses this file). */
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

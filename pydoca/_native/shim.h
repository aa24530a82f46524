/* pydoca's C shims, as cffi reads them (no preprocessor): see shim.c. */
extern "Python" void _pydoca_task_done(struct doca_task *task, uint64_t task_ud, int success);
extern "Python" void _pydoca_ctx_state(uint64_t ctx_ud, struct doca_ctx *ctx, int prev, int next);
extern "Python" void _pydoca_conn_event(int kind, struct doca_rdma_connection *conn, uint64_t conn_ud, uint64_t ctx_ud);
doca_error_t pydoca_ctx_set_state_cb(struct doca_ctx *ctx);
doca_error_t pydoca_rdma_set_conn_cbs(struct doca_rdma *rdma);
uint64_t pydoca_task_get_user_data(const struct doca_task *task);


/* One RDMA task (kind: shim.c's PYDOCA_B_*) allocated and submitted in one call. */
doca_error_t pydoca_rdma_submit_one(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				    struct doca_buf *a, struct doca_buf *b, uint32_t imm, uint64_t ud,
				    struct doca_task **out);

/* A single task whose success is recorded in C for the completing thread (see shim.c), and the refused one. */
doca_error_t pydoca_rdma_submit_fast(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				     struct doca_buf *a, struct doca_buf *b, uint32_t imm, uint64_t key);
struct doca_task *pydoca_refused_take(void);
/* A reference on a and b (b may be NULL) while a task holds them; dropped by pydoca_unhold. */
doca_error_t pydoca_hold(struct doca_buf *a, struct doca_buf *b);
void pydoca_unhold(struct doca_buf *a, struct doca_buf *b);
/* A batch's buffers, held from its submit until each task completed or was refused (pydoca_batch_release). */
doca_error_t pydoca_batch_hold(struct doca_buf **a, struct doca_buf **b, struct pydoca_batch_slot *slots, uint32_t n);
void pydoca_batch_release(struct pydoca_batch_slot *slots, uint32_t first, uint32_t count);
/* The calling thread's recorded completions (their keys), taken: the list is empty afterwards. */
struct pydoca_done_view pydoca_done_take(void);
/* A recorded task that got a done callback in flight completes through _pydoca_task_done instead (0, or -1). */
int pydoca_done_watch(uint64_t key);
/* Forget a watched key (a task recorded before it was watched); 1 if it was there. */
int pydoca_done_unwatch(uint64_t key);

/* Task batches: see shim_types.h. */
doca_error_t pydoca_rdma_batch_submit(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
				      struct doca_buf **a, struct doca_buf **b, const uint32_t *imm,
				      struct pydoca_batch *batch, struct pydoca_batch_slot *slots,
				      uint32_t first, uint32_t count);

doca_error_t pydoca_rdma_batch_submit_ranges(struct doca_rdma *rdma, int kind, struct doca_rdma_connection *conn,
					     struct doca_buf_inventory *inv, struct doca_mmap *lmap, const uint64_t *loff,
					     struct doca_mmap *rmap, const uint64_t *roff, const uint64_t *len,
					     struct pydoca_batch *batch, struct pydoca_batch_slot *slots,
					     uint32_t first, uint32_t count);

/* Task rings: see shim_types.h. Post slot's task (send: ``length`` bytes of its buffer on ``conn``). */
doca_error_t pydoca_ring_post(struct doca_rdma *rdma, struct pydoca_ring *ring, uint32_t slot,
			      struct doca_rdma_connection *conn, uint32_t length);

/* Handler hand-off (see shim.c): jobs counted in by the serving thread, out by workers, both waiting and
   signalling with the interpreter lock released. take: 1 a job, 0 timeout, -1 closed (after every job). */
struct pydoca_handoff;
struct pydoca_handoff *pydoca_handoff_new(void);
void pydoca_handoff_free(struct pydoca_handoff *h);
void pydoca_handoff_set_notify(struct pydoca_handoff *h, uintptr_t kick, uintptr_t pe, int notify_fd);
void pydoca_handoff_close(struct pydoca_handoff *h);
void pydoca_handoff_notify(struct pydoca_handoff *h);
int pydoca_handoff_take(struct pydoca_handoff *h, int finished, int timeout_ms);
int pydoca_handoff_post_wait(struct pydoca_handoff *h, uint32_t n, uintptr_t wait, uintptr_t pe, int timeout_ms,
			     int spin_us);

/* Optional DOCA functions (versions.OPTIONAL, weak): name and presence, by index. */
int pydoca_optional_count(void);
const char *pydoca_optional_name(int i);
int pydoca_optional_present(int i);

typedef int doca_event_handle_t;
typedef doca_event_handle_t doca_notification_handle_t;

#define DOCA_GID_BYTE_LENGTH 16

union doca_data {
	void *ptr;
	uint64_t u64;
};

struct doca_gather_list {
	void *addr;
	uint64_t len;
	struct doca_gather_list *next;
};

enum doca_access_flag {
	DOCA_ACCESS_FLAG_LOCAL_READ_ONLY = 0,
	DOCA_ACCESS_FLAG_LOCAL_READ_WRITE = 1,
	DOCA_ACCESS_FLAG_RDMA_READ = 2,
	DOCA_ACCESS_FLAG_RDMA_WRITE = 4,
	DOCA_ACCESS_FLAG_RDMA_ATOMIC = 8,
	DOCA_ACCESS_FLAG_PCI_READ_ONLY = 16,
	DOCA_ACCESS_FLAG_PCI_READ_WRITE = 32,
	DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING = 64,
};

enum doca_pci_func_type {
	DOCA_PCI_FUNC_TYPE_PF = 0,
	DOCA_PCI_FUNC_TYPE_VF = 1,
	DOCA_PCI_FUNC_TYPE_SF = 2,
};

typedef uint16_t doca_be16_t;
typedef uint32_t doca_be32_t;
typedef uint64_t doca_be64_t;

enum doca_gpu_mem_type {
	DOCA_GPU_MEM_TYPE_GPU = 0,
	DOCA_GPU_MEM_TYPE_GPU_CPU = 1,
	DOCA_GPU_MEM_TYPE_CPU_GPU = 2,
};

enum doca_eth_wait_on_time_type {
	DOCA_ETH_WAIT_ON_TIME_TYPE_NONE = 0,
	DOCA_ETH_WAIT_ON_TIME_TYPE_NATIVE = 1,
	DOCA_ETH_WAIT_ON_TIME_TYPE_DPDK = 2,
};

enum doca_mtu_size {
	DOCA_MTU_SIZE_256_BYTES = 0,
	DOCA_MTU_SIZE_512_BYTES = 1,
	DOCA_MTU_SIZE_1K_BYTES = 2,
	DOCA_MTU_SIZE_2K_BYTES = 3,
	DOCA_MTU_SIZE_4K_BYTES = 4,
	DOCA_MTU_SIZE_RAW_ETHERNET = 5,
};

struct doca_ip {
	uint32_t ip[4];
	uint8_t is_ipv4;
};

struct doca_devinfo;
struct doca_devinfo_rep;
struct doca_dev;
struct doca_dev_rep;
struct doca_mmap;
struct doca_buf;
struct doca_buf_inventory;
struct doca_ctx;
struct doca_pe;
struct doca_task;
struct doca_task_batch;
struct doca_dpa;
struct doca_gpu;
struct doca_rdma;
struct doca_rdma_addr;
struct doca_rdma_connection;
struct doca_rdma_task_receive;
struct doca_rdma_task_send;
struct doca_rdma_task_send_imm;
struct doca_rdma_task_read;
struct doca_rdma_task_write;
struct doca_rdma_task_write_imm;
struct doca_rdma_task_atomic_cmp_swp;
struct doca_rdma_task_atomic_fetch_add;

/*
 * libdoca_rdma.so.3 of the softdoca runtime: the DOCA RDMA functions live in
 * libdoca_common.so.3 with the rest of softdoca (one copy of the code and of
 * its state per process); this library only depends on it, so that programs
 * linking -ldoca_rdma (pkg-config doca-rdma) and loaders opening
 * libdoca_rdma.so get the same symbols. Intentionally no code.
 */
typedef int softdoca_doca_rdma_lib_is_a_thin_dependency_t;

const char *doca_version_runtime(void);

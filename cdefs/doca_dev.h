#define DOCA_DEVINFO_VUID_SIZE 128
#define DOCA_DEVINFO_IPV4_ADDR_SIZE 4
#define DOCA_DEVINFO_IPV6_ADDR_SIZE 16
#define DOCA_DEVINFO_MAC_ADDR_SIZE 6
#define DOCA_DEVINFO_IFACE_NAME_SIZE 256
#define DOCA_DEVINFO_IBDEV_NAME_SIZE 64
#define DOCA_DEVINFO_PCI_ADDR_SIZE 13
#define DOCA_DEVINFO_PCI_BDF_SIZE 8
#define DOCA_DEVINFO_REP_VUID_SIZE 128
#define DOCA_DEVINFO_REP_PCI_ADDR_SIZE 13
#define DOCA_DEVINFO_REP_PCI_BDF_SIZE 8

enum doca_devinfo_rep_filter {
	DOCA_DEVINFO_REP_FILTER_ALL = 0,
	DOCA_DEVINFO_REP_FILTER_NET = 2,
	DOCA_DEVINFO_REP_FILTER_EMULATED = 4,
};

doca_error_t doca_devinfo_create_list(struct doca_devinfo ***dev_list, uint32_t *nb_devs);
doca_error_t doca_devinfo_destroy_list(struct doca_devinfo **dev_list);
doca_error_t doca_devinfo_rep_create_list(struct doca_dev *dev,
					  int filter,
					  struct doca_devinfo_rep ***dev_list_rep,
					  uint32_t *nb_devs_rep);
doca_error_t doca_devinfo_rep_destroy_list(struct doca_devinfo_rep **dev_list_rep);
doca_error_t doca_dev_open(struct doca_devinfo *devinfo, struct doca_dev **dev);
doca_error_t doca_dev_close(struct doca_dev *dev);
doca_error_t doca_dev_accelerate_resource_reclaim(struct doca_dev *dev);
doca_error_t doca_dev_rep_open(struct doca_devinfo_rep *devinfo, struct doca_dev_rep **dev_rep);
doca_error_t doca_dev_rep_close(struct doca_dev_rep *dev);
struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev);
struct doca_devinfo_rep *doca_dev_rep_as_devinfo(struct doca_dev_rep *dev_rep);
doca_error_t doca_devinfo_get_pci_addr_str(const struct doca_devinfo *devinfo, char *pci_addr_str);
doca_error_t doca_devinfo_get_pci_func_type(const struct doca_devinfo *devinfo, enum doca_pci_func_type *pci_func_type);
doca_error_t doca_devinfo_is_equal_pci_addr(const struct doca_devinfo *devinfo,
					    const char *pci_addr_str,
					    uint8_t *is_equal);
doca_error_t doca_devinfo_get_ipv4_addr(const struct doca_devinfo *devinfo, uint8_t *ipv4_addr, uint32_t size);
doca_error_t doca_devinfo_get_ipv6_addr(const struct doca_devinfo *devinfo, uint8_t *ipv6_addr, uint32_t size);
doca_error_t doca_devinfo_get_mac_addr(const struct doca_devinfo *devinfo, uint8_t *mac_addr, uint32_t size);
doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo *devinfo, char *iface_name, uint32_t size);
doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo *devinfo, char *ibdev_name, uint32_t size);
doca_error_t doca_devinfo_get_sf_index(const struct doca_devinfo *devinfo, uint32_t *sf_index);
doca_error_t doca_devinfo_get_lid(const struct doca_devinfo *devinfo, uint16_t *lid);
doca_error_t doca_devinfo_get_active_rate(const struct doca_devinfo *devinfo, uint64_t *active_rate);
doca_error_t doca_devinfo_get_vhca_id(const struct doca_devinfo *devinfo, uint16_t *vhca_id);
doca_error_t doca_devinfo_get_uplink_ib_port(const struct doca_devinfo *devinfo, uint16_t *ib_port);
doca_error_t doca_devinfo_get_iface_index(const struct doca_devinfo *devinfo, uint32_t *iface_index);
doca_error_t doca_devinfo_get_data_direct_pci_dev(struct doca_devinfo *devinfo, char *pci_addr_str);
doca_error_t doca_devinfo_cap_is_hotplug_manager_supported(const struct doca_devinfo *devinfo,
							   uint8_t *is_hotplug_manager);
doca_error_t doca_devinfo_cap_is_notification_moderation_supported(const struct doca_devinfo *devinfo,
								   uint8_t *is_notification_moderation_supported);
doca_error_t doca_devinfo_rep_cap_is_filter_all_supported(const struct doca_devinfo *devinfo,
							  uint8_t *filter_all_supported);
doca_error_t doca_devinfo_rep_cap_is_filter_net_supported(const struct doca_devinfo *devinfo,
							  uint8_t *filter_net_supported);
doca_error_t doca_devinfo_rep_cap_is_filter_emulated_supported(const struct doca_devinfo *devinfo,
							       uint8_t *filter_emulated_supported);
doca_error_t doca_devinfo_cap_is_accelerate_resource_reclaim_supported(const struct doca_devinfo *devinfo,
								       uint8_t *is_accelerate_resource_reclaim);
doca_error_t doca_devinfo_rep_get_vuid(const struct doca_devinfo_rep *devinfo_rep, char *rep_vuid, uint32_t size);
doca_error_t doca_devinfo_rep_get_pci_addr_str(const struct doca_devinfo_rep *devinfo_rep, char *pci_addr_str);
doca_error_t doca_devinfo_rep_get_pci_func_type(const struct doca_devinfo_rep *devinfo_rep,
						enum doca_pci_func_type *pci_func_type);
doca_error_t doca_devinfo_rep_get_is_hotplug(const struct doca_devinfo_rep *devinfo_rep, uint8_t *is_hotplug);
doca_error_t doca_devinfo_rep_get_iface_name(const struct doca_devinfo_rep *devinfo_rep,
					     char *iface_name,
					     uint32_t size);
doca_error_t doca_devinfo_rep_get_iface_index(const struct doca_devinfo_rep *devinfo_rep, uint32_t *iface_index);
doca_error_t doca_devinfo_rep_get_ib_port(const struct doca_devinfo_rep *devinfo_rep, uint16_t *ib_port);
doca_error_t doca_devinfo_rep_get_host_index(const struct doca_devinfo_rep *devinfo_rep, uint32_t *host_index);
doca_error_t doca_devinfo_rep_get_pf_index(const struct doca_devinfo_rep *devinfo_rep, uint32_t *pf_index);
doca_error_t doca_devinfo_rep_get_vf_index(const struct doca_devinfo_rep *devinfo_rep, uint32_t *vf_index);
doca_error_t doca_devinfo_rep_get_sf_index(const struct doca_devinfo_rep *devinfo_rep, uint32_t *sf_index);
doca_error_t doca_devinfo_rep_get_vhca_id(const struct doca_devinfo_rep *devinfo_rep, uint16_t *vhca_id);
doca_error_t doca_devinfo_rep_get_total_vfs(const struct doca_devinfo_rep *devinfo_rep, uint32_t *total_vfs);
doca_error_t doca_devinfo_rep_get_pf_vuid(struct doca_devinfo_rep *devinfo_rep, char *pf_vuid, uint32_t size);
doca_error_t doca_devinfo_rep_get_data_direct_pci_dev(struct doca_devinfo_rep *devinfo_rep, char *pci_addr_str);
doca_error_t doca_devinfo_rep_get_is_uplink_representor(const struct doca_devinfo_rep *devinfo_rep,
							uint8_t *is_uplink_representor);
doca_error_t doca_devinfo_rep_is_equal_pci_addr(const struct doca_devinfo_rep *devinfo_rep,
						const char *pci_addr_str,
						uint8_t *is_equal);

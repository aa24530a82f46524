/* Soft devices: one per network interface that has an IPv4 or IPv6 address. */
#include "internal.h"

#include <ctype.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define SD_DEFAULT_RATE_GBPS 100.0

static struct doca_devinfo *find_or_add(struct doca_devinfo *infos, uint32_t *n, uint32_t max,
					const char *name)
{
	unsigned int idx = if_nametoindex(name);

	if (idx == 0)
		return NULL;
	for (uint32_t i = 0; i < *n; i++)
		if (infos[i].iface_index == idx)
			return &infos[i];
	if (*n >= max)
		return NULL;
	struct doca_devinfo *d = &infos[(*n)++];
	memset(d, 0, sizeof(*d));
	snprintf(d->iface_name, sizeof(d->iface_name), "%s", name);
	snprintf(d->ibdev_name, sizeof(d->ibdev_name), "soft_%.50s", name);
	d->iface_index = idx;
	/* Domain 0000, bus 0x5d (+ high bits), device = low 5 bits, function = next 3. */
	snprintf(d->pci_addr, sizeof(d->pci_addr), "%04x:%02x:%02x.%x", 0u,
		 (0x5du + (idx >> 8)) & 0xffu, idx & 0x1fu, (idx >> 5) & 0x7u);
	return d;
}

static void fill_mac_rate(struct doca_devinfo *d)
{
	struct ifreq ifr;
	char path[128];
	FILE *f;
	long mbps = -1;
	int s;

	d->active_rate = SD_DEFAULT_RATE_GBPS;
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s >= 0) {
		memset(&ifr, 0, sizeof(ifr));
		size_t n = strnlen(d->iface_name, sizeof(ifr.ifr_name) - 1);
		memcpy(ifr.ifr_name, d->iface_name, n);
		if (ioctl(s, SIOCGIFHWADDR, &ifr) == 0)
			memcpy(d->mac, ifr.ifr_hwaddr.sa_data, 6);
		close(s);
	}
	snprintf(path, sizeof(path), "/sys/class/net/%.64s/speed", d->iface_name);
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%ld", &mbps) == 1 && mbps > 0)
			d->active_rate = (double)mbps / 1000.0;
		fclose(f);
	}
}

static int by_index(const void *a, const void *b)
{
	const struct doca_devinfo *x = a, *y = b;

	return (x->iface_index > y->iface_index) - (x->iface_index < y->iface_index);
}

static int is_link_local6(const uint8_t *a)
{
	return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

SD_EXPORT doca_error_t doca_devinfo_create_list(struct doca_devinfo ***dev_list, uint32_t *nb_devs)
{
	struct ifaddrs *ifa = NULL;
	struct doca_devinfo *infos, **list;
	uint32_t n = 0, max = 0;

	if (!dev_list || !nb_devs)
		return DOCA_ERROR_INVALID_VALUE;
	if (getifaddrs(&ifa) != 0)
		return DOCA_ERROR_NOT_FOUND;
	for (struct ifaddrs *p = ifa; p; p = p->ifa_next)
		max++;
	infos = calloc(max ? max : 1, sizeof(*infos));
	if (!infos) {
		freeifaddrs(ifa);
		return DOCA_ERROR_NO_MEMORY;
	}
	for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
		if (!p->ifa_addr || !p->ifa_name)
			continue;
		int fam = p->ifa_addr->sa_family;
		if (fam != AF_INET && fam != AF_INET6)
			continue;
		struct doca_devinfo *d = find_or_add(infos, &n, max, p->ifa_name);
		if (!d)
			continue;
		if (fam == AF_INET && !d->has_ipv4) {
			const struct sockaddr_in *sin = (const void *)p->ifa_addr;
			memcpy(d->ipv4, &sin->sin_addr, 4);
			d->has_ipv4 = 1;
		} else if (fam == AF_INET6) {
			const struct sockaddr_in6 *sin6 = (const void *)p->ifa_addr;
			const uint8_t *a = sin6->sin6_addr.s6_addr;
			/* prefer the first non-link-local address */
			if (!d->has_ipv6 || (is_link_local6(d->ipv6) && !is_link_local6(a))) {
				memcpy(d->ipv6, a, 16);
				d->has_ipv6 = 1;
			}
		}
	}
	freeifaddrs(ifa);
	qsort(infos, n, sizeof(*infos), by_index);

	/* One block: n + 1 pointers (NULL-terminated), then the devinfos. */
	list = malloc((n + 1) * sizeof(*list) + (n ? n : 1) * sizeof(*infos));
	if (!list) {
		free(infos);
		return DOCA_ERROR_NO_MEMORY;
	}
	struct doca_devinfo *copy = (struct doca_devinfo *)(void *)(list + n + 1);
	for (uint32_t i = 0; i < n; i++) {
		copy[i] = infos[i];
		fill_mac_rate(&copy[i]);
		list[i] = &copy[i];
	}
	list[n] = NULL;
	free(infos);
	*dev_list = list;
	*nb_devs = n;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_destroy_list(struct doca_devinfo **dev_list)
{
	if (!dev_list)
		return DOCA_ERROR_INVALID_VALUE;
	free(dev_list);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_dev_open(struct doca_devinfo *devinfo, struct doca_dev **dev)
{
	struct doca_dev *d;

	if (!devinfo || !dev)
		return DOCA_ERROR_INVALID_VALUE;
	d = calloc(1, sizeof(*d));
	if (!d)
		return DOCA_ERROR_NO_MEMORY;
	d->info = *devinfo;
	atomic_init(&d->refs, 0);
	if (sd_handle_add_kind(d, SD_H_DEV) != 0) {
		free(d);
		return DOCA_ERROR_NO_MEMORY;
	}
	*dev = d;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_dev_close(struct doca_dev *dev)
{
	if (!dev)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	if (atomic_load(&dev->refs) > 0)
		return DOCA_ERROR_IN_USE;
	sd_handle_del(dev);
	free(dev);
	return DOCA_SUCCESS;
}

SD_EXPORT struct doca_devinfo *doca_dev_as_devinfo(const struct doca_dev *dev)
{
	if (!dev || !sd_handle_live_kind(dev, SD_H_DEV))
		return NULL;
	return (struct doca_devinfo *)&dev->info;
}

SD_EXPORT doca_error_t doca_devinfo_get_pci_addr_str(const struct doca_devinfo *devinfo, char *pci_addr_str)
{
	size_t n;

	if (!devinfo || !pci_addr_str)
		return DOCA_ERROR_INVALID_VALUE;
	n = strnlen(devinfo->pci_addr, DOCA_DEVINFO_PCI_ADDR_SIZE - 1);

	memcpy(pci_addr_str, devinfo->pci_addr, n);
	pci_addr_str[n] = '\0';
	return DOCA_SUCCESS;
}

/* "XXXX:XX:XX.X" (full) or "XX:XX.X" (BDF) with hex digits. */
static int pci_format_ok(const char *s, size_t len)
{
	static const char full[] = "hhhh:hh:hh.h";
	const char *pat = len == 12 ? full : len == 7 ? full + 5 : NULL;

	if (!pat)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (pat[i] == 'h' ? !isxdigit((unsigned char)s[i]) : s[i] != pat[i])
			return 0;
	}
	return 1;
}

SD_EXPORT doca_error_t doca_devinfo_is_equal_pci_addr(const struct doca_devinfo *devinfo,
						      const char *pci_addr_str, uint8_t *is_equal)
{
	size_t len;

	if (!devinfo || !pci_addr_str || !is_equal)
		return DOCA_ERROR_INVALID_VALUE;
	len = strnlen(pci_addr_str, DOCA_DEVINFO_PCI_ADDR_SIZE);
	if (!pci_format_ok(pci_addr_str, len))
		return DOCA_ERROR_INVALID_VALUE;
	if (len == 12)
		*is_equal = strcasecmp(pci_addr_str, devinfo->pci_addr) == 0;
	else
		*is_equal = strncmp(devinfo->pci_addr, "0000:", 5) == 0 &&
			    strcasecmp(pci_addr_str, devinfo->pci_addr + 5) == 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_ipv4_addr(const struct doca_devinfo *devinfo, uint8_t *ipv4_addr,
						  uint32_t size)
{
	if (!devinfo || !ipv4_addr || size < DOCA_DEVINFO_IPV4_ADDR_SIZE)
		return DOCA_ERROR_INVALID_VALUE;
	if (!devinfo->has_ipv4)
		return DOCA_ERROR_NOT_FOUND;
	memcpy(ipv4_addr, devinfo->ipv4, DOCA_DEVINFO_IPV4_ADDR_SIZE);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_ipv6_addr(const struct doca_devinfo *devinfo, uint8_t *ipv6_addr,
						  uint32_t size)
{
	if (!devinfo || !ipv6_addr || size < DOCA_DEVINFO_IPV6_ADDR_SIZE)
		return DOCA_ERROR_INVALID_VALUE;
	if (!devinfo->has_ipv6)
		return DOCA_ERROR_NOT_FOUND;
	memcpy(ipv6_addr, devinfo->ipv6, DOCA_DEVINFO_IPV6_ADDR_SIZE);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_mac_addr(const struct doca_devinfo *devinfo, uint8_t *mac_addr,
						 uint32_t size)
{
	if (!devinfo || !mac_addr || size < DOCA_DEVINFO_MAC_ADDR_SIZE)
		return DOCA_ERROR_INVALID_VALUE;
	memcpy(mac_addr, devinfo->mac, DOCA_DEVINFO_MAC_ADDR_SIZE);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo *devinfo, char *iface_name,
						   uint32_t size)
{
	if (!devinfo || !iface_name || size < DOCA_DEVINFO_IFACE_NAME_SIZE)
		return DOCA_ERROR_INVALID_VALUE;
	snprintf(iface_name, size, "%s", devinfo->iface_name);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo *devinfo, char *ibdev_name,
						   uint32_t size)
{
	if (!devinfo || !ibdev_name || size < DOCA_DEVINFO_IBDEV_NAME_SIZE)
		return DOCA_ERROR_INVALID_VALUE;
	snprintf(ibdev_name, size, "%s", devinfo->ibdev_name);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_lid(const struct doca_devinfo *devinfo, uint16_t *lid)
{
	if (!devinfo || !lid)
		return DOCA_ERROR_INVALID_VALUE;
	*lid = devinfo->lid;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_active_rate(const struct doca_devinfo *devinfo, uint64_t *active_rate)
{
	if (!devinfo || !active_rate)
		return DOCA_ERROR_INVALID_VALUE;
	/* DOCA reports bits per second. */
	*active_rate = (uint64_t)(devinfo->active_rate * 1e9);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_get_iface_index(const struct doca_devinfo *devinfo, uint32_t *iface_index)
{
	if (!devinfo || !iface_index)
		return DOCA_ERROR_INVALID_VALUE;
	*iface_index = devinfo->iface_index;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- DOCA 3.3 additions
 * Answered as DOCA answers on a host without a DPU, representors, SFs, data
 * direct devices or hotplug emulation (docs/softdoca-contract.md, "Functions
 * answered as on a host without the hardware"). */

static doca_error_t dev_check(const struct doca_dev *dev)
{
	if (!dev)
		return DOCA_ERROR_INVALID_VALUE;
	return sd_handle_live_kind(dev, SD_H_DEV) ? DOCA_SUCCESS : DOCA_ERROR_BAD_STATE;
}

/* A soft device exposes no representors (it is no eswitch manager): the
 * representor capabilities are 0, so listing fails with NOT_SUPPORTED as
 * doca_dev.h guarantees for that case. */
SD_EXPORT doca_error_t doca_devinfo_rep_create_list(struct doca_dev *dev, int filter,
						    struct doca_devinfo_rep ***dev_list_rep, uint32_t *nb_devs_rep)
{
	doca_error_t rc;

	if (!dev_list_rep || !nb_devs_rep)
		return DOCA_ERROR_INVALID_VALUE;
	if (filter & ~(DOCA_DEVINFO_REP_FILTER_NET | DOCA_DEVINFO_REP_FILTER_EMULATED))
		return DOCA_ERROR_INVALID_VALUE;
	rc = dev_check(dev);
	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

/* No representor list is ever created, so none can be destroyed. */
SD_EXPORT doca_error_t doca_devinfo_rep_destroy_list(struct doca_devinfo_rep **dev_list_rep)
{
	(void)dev_list_rep;
	return DOCA_ERROR_INVALID_VALUE;
}

SD_EXPORT doca_error_t doca_dev_accelerate_resource_reclaim(struct doca_dev *dev)
{
	doca_error_t rc = dev_check(dev);

	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

/* No doca_devinfo_rep exists in softdoca: any one passed is invalid input. */
SD_EXPORT doca_error_t doca_dev_rep_open(struct doca_devinfo_rep *devinfo, struct doca_dev_rep **dev_rep)
{
	(void)devinfo;
	(void)dev_rep;
	return DOCA_ERROR_INVALID_VALUE;
}

SD_EXPORT doca_error_t doca_dev_rep_close(struct doca_dev_rep *dev)
{
	(void)dev;
	return DOCA_ERROR_INVALID_VALUE;
}

SD_EXPORT struct doca_devinfo_rep *doca_dev_rep_as_devinfo(struct doca_dev_rep *dev_rep)
{
	(void)dev_rep;
	return NULL;
}

/* Soft devices stand for physical functions. */
SD_EXPORT doca_error_t doca_devinfo_get_pci_func_type(const struct doca_devinfo *devinfo,
						      enum doca_pci_func_type *pci_func_type)
{
	if (!devinfo || !pci_func_type)
		return DOCA_ERROR_INVALID_VALUE;
	*pci_func_type = DOCA_PCI_FUNC_TYPE_PF;
	return DOCA_SUCCESS;
}

/* DOCA: NOT_SUPPORTED when the device is not an SF; soft devices are PFs. */
SD_EXPORT doca_error_t doca_devinfo_get_sf_index(const struct doca_devinfo *devinfo, uint32_t *sf_index)
{
	if (!devinfo || !sf_index)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

/* The function's id on its (virtual) HCA: the interface index, unique per
 * soft device of the host (low 16 bits). */
SD_EXPORT doca_error_t doca_devinfo_get_vhca_id(const struct doca_devinfo *devinfo, uint16_t *vhca_id)
{
	if (!devinfo || !vhca_id)
		return DOCA_ERROR_INVALID_VALUE;
	*vhca_id = (uint16_t)devinfo->iface_index;
	return DOCA_SUCCESS;
}

/* One port per soft device: port 1. */
SD_EXPORT doca_error_t doca_devinfo_get_uplink_ib_port(const struct doca_devinfo *devinfo, uint16_t *ib_port)
{
	if (!devinfo || !ib_port)
		return DOCA_ERROR_INVALID_VALUE;
	*ib_port = 1;
	return DOCA_SUCCESS;
}

/* Linux, no data direct device: NOT_FOUND (DOCA keeps NOT_SUPPORTED for other OSes). */
SD_EXPORT doca_error_t doca_devinfo_get_data_direct_pci_dev(struct doca_devinfo *devinfo, char *pci_addr_str)
{
	if (!devinfo || !pci_addr_str)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_FOUND;
}

static doca_error_t cap_no(const struct doca_devinfo *devinfo, uint8_t *out)
{
	if (!devinfo || !out)
		return DOCA_ERROR_INVALID_VALUE;
	*out = 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_devinfo_cap_is_hotplug_manager_supported(const struct doca_devinfo *devinfo,
								     uint8_t *is_hotplug_manager)
{
	return cap_no(devinfo, is_hotplug_manager);
}

SD_EXPORT doca_error_t doca_devinfo_cap_is_notification_moderation_supported(const struct doca_devinfo *devinfo,
									     uint8_t *is_notification_moderation_supported)
{
	return cap_no(devinfo, is_notification_moderation_supported);
}

SD_EXPORT doca_error_t doca_devinfo_rep_cap_is_filter_all_supported(const struct doca_devinfo *devinfo,
								    uint8_t *filter_all_supported)
{
	return cap_no(devinfo, filter_all_supported);
}

SD_EXPORT doca_error_t doca_devinfo_rep_cap_is_filter_net_supported(const struct doca_devinfo *devinfo,
								    uint8_t *filter_net_supported)
{
	return cap_no(devinfo, filter_net_supported);
}

SD_EXPORT doca_error_t doca_devinfo_rep_cap_is_filter_emulated_supported(const struct doca_devinfo *devinfo,
									 uint8_t *filter_emulated_supported)
{
	return cap_no(devinfo, filter_emulated_supported);
}

SD_EXPORT doca_error_t
doca_devinfo_cap_is_accelerate_resource_reclaim_supported(const struct doca_devinfo *devinfo,
							  uint8_t *is_accelerate_resource_reclaim)
{
	return cap_no(devinfo, is_accelerate_resource_reclaim);
}

/* Representor getters: there is no representor device info in softdoca, so
 * whatever is passed is invalid input. */
#define SD_REP_INVALID(proto)                  \
	SD_EXPORT doca_error_t proto            \
	{                                       \
		return DOCA_ERROR_INVALID_VALUE; \
	}

SD_REP_INVALID(doca_devinfo_rep_get_vuid(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					 char *rep_vuid SD_UNUSED, uint32_t size SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_pci_addr_str(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
						 char *pci_addr_str SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_pci_func_type(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
						  enum doca_pci_func_type *pci_func_type SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_is_hotplug(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					       uint8_t *is_hotplug SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_iface_name(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					       char *iface_name SD_UNUSED, uint32_t size SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_iface_index(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
						uint32_t *iface_index SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_ib_port(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					    uint16_t *ib_port SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_host_index(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					       uint32_t *host_index SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_pf_index(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					     uint32_t *pf_index SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_vf_index(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					     uint32_t *vf_index SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_sf_index(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					     uint32_t *sf_index SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_vhca_id(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					    uint16_t *vhca_id SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_total_vfs(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					      uint32_t *total_vfs SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_pf_vuid(struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
					    char *pf_vuid SD_UNUSED, uint32_t size SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_data_direct_pci_dev(struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
							char *pci_addr_str SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_get_is_uplink_representor(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
							  uint8_t *is_uplink_representor SD_UNUSED))
SD_REP_INVALID(doca_devinfo_rep_is_equal_pci_addr(const struct doca_devinfo_rep *devinfo_rep SD_UNUSED,
						  const char *pci_addr_str SD_UNUSED, uint8_t *is_equal SD_UNUSED))

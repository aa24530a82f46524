/* softdoca providers: blob header codec, crc32, the provider list, and the checks
 * that a provider's table and capabilities keep the interface's rules. */
#include "provider.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

uint32_t sd_prov_crc32(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t c = 0xffffffffu;

	for (size_t i = 0; i < len; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
	}
	return ~c;
}

/* crc over the blob with the crc field (bytes 28..31) taken as zero */
static uint32_t blob_crc(const uint8_t *b, uint32_t len)
{
	static const uint8_t zero[4];
	uint32_t c = 0xffffffffu;

	for (uint32_t i = 0; i < len; i++) {
		c ^= (i >= 28 && i < 32) ? zero[i - 28] : b[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
	}
	return ~c;
}

void sd_prov_blob_begin(uint8_t *out, const char *provider, enum sd_prov_blob_kind kind, uint32_t len)
{
	memset(out, 0, SD_PROV_BLOB_HDR_LEN);
	put_le32(out, SD_PROV_BLOB_MAGIC);
	put_le16(out + 4, SD_PROV_BLOB_VERSION);
	out[6] = (uint8_t)kind;
	strncpy((char *)out + 8, provider, SD_PROV_NAME_LEN);
	put_le32(out + 24, len);
}

void sd_prov_blob_seal(uint8_t *blob, uint32_t len)
{
	put_le32(blob + 28, 0);
	put_le32(blob + 28, blob_crc(blob, len));
}

void sd_prov_blob_provider(const void *blob, size_t len, char out[SD_PROV_NAME_LEN + 1])
{
	const uint8_t *b = blob;

	out[0] = 0;
	if (!b || len < SD_PROV_BLOB_HDR_LEN || get_le32(b) != SD_PROV_BLOB_MAGIC)
		return;
	for (int i = 0; i < SD_PROV_NAME_LEN; i++) {
		char ch = (char)b[8 + i];
		out[i] = (ch >= 0x20 && ch < 0x7f) ? ch : 0;
		if (!ch)
			break;
	}
	out[SD_PROV_NAME_LEN] = 0;
}

static const char *kind_name(unsigned k)
{
	return k == SD_PROV_BLOB_RKEY ? "remote key" : k == SD_PROV_BLOB_ADDR ? "connection address" : "unknown";
}

#define WHY(...) do { if (why) snprintf(why->msg, sizeof(why->msg), __VA_ARGS__); } while (0)

doca_error_t sd_prov_blob_check(const void *blob, size_t len, const char *provider,
				enum sd_prov_blob_kind kind, const uint8_t **body, size_t *body_len,
				struct sd_prov_why *why)
{
	const uint8_t *b = blob;
	char name[SD_PROV_NAME_LEN + 1];
	uint32_t total;

	if (!b || len < SD_PROV_BLOB_HDR_LEN) {
		WHY("%s %s blob truncated: %zu bytes, the header alone is %u", provider, kind_name(kind), b ? len : 0,
		    SD_PROV_BLOB_HDR_LEN);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (get_le32(b) != SD_PROV_BLOB_MAGIC) {
		WHY("not a softdoca provider blob (bad magic 0x%08x)", get_le32(b));
		return DOCA_ERROR_INVALID_VALUE;
	}
	sd_prov_blob_provider(b, len, name);
	if (strncmp(name, provider, SD_PROV_NAME_LEN) != 0) {
		WHY("%s blob of provider '%s' given to provider '%s': export and import with the same provider "
		    "(SOFTDOCA_PROVIDER)", kind_name(b[6]), name, provider);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	if (get_le16(b + 4) != SD_PROV_BLOB_VERSION) {
		WHY("%s blob format version %u, this softdoca reads version %u", provider, get_le16(b + 4),
		    SD_PROV_BLOB_VERSION);
		return DOCA_ERROR_UNSUPPORTED_VERSION;
	}
	if (b[6] != (uint8_t)kind) {
		WHY("%s blob is a %s, a %s was expected", provider, kind_name(b[6]), kind_name(kind));
		return DOCA_ERROR_INVALID_VALUE;
	}
	total = get_le32(b + 24);
	if (total != len || total > SD_PROV_BLOB_MAX) {
		WHY("%s %s blob length %zu, its header says %u (truncated or padded)", provider, kind_name(kind),
		    len, total);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (blob_crc(b, total) != get_le32(b + 28)) {
		WHY("%s %s blob corrupted (crc mismatch)", provider, kind_name(kind));
		return DOCA_ERROR_INVALID_VALUE;
	}
	*body = b + SD_PROV_BLOB_HDR_LEN;
	*body_len = total - SD_PROV_BLOB_HDR_LEN;
	return DOCA_SUCCESS;
}

const struct sd_provider_ops *sd_provider_find(const char *name)
{
#ifdef SD_HAVE_UCX
	if (name && strcmp(name, sd_provider_ucx.name) == 0)
		return &sd_provider_ucx;
#endif
#ifdef SD_HAVE_OFI
	if (name && strcmp(name, sd_provider_ofi.name) == 0)
		return &sd_provider_ofi;
#endif
	(void)name;
	return NULL;
}

/* The members every table has, and the ones a capability brings (by name, for the reason). */
#define OP(m) {#m, offsetof(struct sd_provider_ops, m)}
struct member {
	const char *name;
	size_t off;
};
static const struct member always[] = {
	OP(probe), OP(open), OP(close), OP(query_caps), OP(progress), OP(reg_mem), OP(dereg_mem),
	OP(rkey_import), OP(rkey_release), OP(conn_create), OP(conn_set_ctx), OP(conn_transport),
	OP(conn_close), OP(closing), OP(write), OP(read), OP(atomic_fadd), OP(atomic_cswap), OP(send),
	OP(write_imm), OP(flush), OP(rx_resume),
};
static const struct member with_oob[] = {OP(conn_export), OP(conn_connect)};
static const struct member with_cm[] = {OP(listen), OP(listener_close), OP(accept), OP(reject), OP(connect_addr)};
static const struct member with_fd[] = {OP(get_fd), OP(arm)};
#undef OP

static const struct member *missing(const struct sd_provider_ops *ops, const struct member *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		void (*fn)(void);

		memcpy(&fn, (const char *)ops + m[i].off, sizeof(fn)); /* every member is a function pointer */
		if (!fn)
			return &m[i];
	}
	return NULL;
}

#define NMEMB(a) (sizeof(a) / sizeof((a)[0]))

doca_error_t sd_prov_ops_check(const struct sd_provider_ops *ops, struct sd_prov_why *why)
{
	struct sd_prov_why scratch;
	const struct member *m;

	if (!why)
		why = &scratch;
	if (!ops || !ops->name || !ops->name[0] || strlen(ops->name) > SD_PROV_NAME_LEN) {
		snprintf(why->msg, sizeof(why->msg), "a provider table without a name of 1 to %d characters",
			 SD_PROV_NAME_LEN);
		return DOCA_ERROR_INVALID_VALUE;
	}
	if (ops->abi != SD_PROV_ABI) {
		snprintf(why->msg, sizeof(why->msg),
			 "provider %s was built for provider ABI %u, this softdoca drives ABI %u: rebuild it against "
			 "this softdoca's providers/provider.h",
			 ops->name, ops->abi, SD_PROV_ABI);
		return DOCA_ERROR_UNSUPPORTED_VERSION;
	}
	m = missing(ops, always, NMEMB(always));
	if (m) {
		snprintf(why->msg, sizeof(why->msg), "provider %s has no %s(), which every provider implements",
			 ops->name, m->name);
		return DOCA_ERROR_NOT_SUPPORTED;
	}
	return DOCA_SUCCESS;
}

doca_error_t sd_prov_caps_check(const struct sd_provider_ops *ops, const struct sd_prov_caps *caps, uint32_t need,
				struct sd_prov_why *why)
{
	static const struct {
		uint32_t flag;
		const char *name;
		const struct member *m;
		size_t n;
	} gated[] = {{SD_PROV_CAP_OOB, "SD_PROV_CAP_OOB", with_oob, NMEMB(with_oob)},
		     {SD_PROV_CAP_CM, "SD_PROV_CAP_CM", with_cm, NMEMB(with_cm)},
		     {SD_PROV_CAP_FD, "SD_PROV_CAP_FD", with_fd, NMEMB(with_fd)}};
	struct sd_prov_why scratch;

	if (!why)
		why = &scratch;

	if (strncmp(caps->name, ops->name, sizeof(caps->name)) != 0) {
		snprintf(why->msg, sizeof(why->msg), "provider %s reports its name as \"%.*s\"", ops->name,
			 (int)sizeof(caps->name), caps->name);
		return DOCA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < NMEMB(gated); i++) {
		const struct member *m;

		if ((need & gated[i].flag) && !(caps->flags & gated[i].flag)) {
			snprintf(why->msg, sizeof(why->msg), "provider %s (%s) lacks %s, which softdoca needs of a provider",
				 ops->name, caps->transport[0] ? caps->transport : "no transport yet", gated[i].name);
			return DOCA_ERROR_NOT_SUPPORTED;
		}
		m = (caps->flags & gated[i].flag) ? missing(ops, gated[i].m, gated[i].n) : NULL;
		if (m) {
			snprintf(why->msg, sizeof(why->msg), "provider %s claims %s but has no %s()", ops->name,
				 gated[i].name, m->name);
			return DOCA_ERROR_NOT_SUPPORTED;
		}
	}
	if (caps->max_iov < 1 || caps->max_msg < 1) {
		snprintf(why->msg, sizeof(why->msg), "provider %s reports max_iov %u and max_msg %llu: both must be >= 1",
			 ops->name, caps->max_iov, (unsigned long long)caps->max_msg);
		return DOCA_ERROR_INVALID_VALUE;
	}
	return DOCA_SUCCESS;
}

const char *sd_prov_strerror(doca_error_t e)
{
	static const char *const n[] = {
		"DOCA_SUCCESS", "DOCA_ERROR_UNKNOWN", "DOCA_ERROR_NOT_PERMITTED", "DOCA_ERROR_IN_USE",
		"DOCA_ERROR_NOT_SUPPORTED", "DOCA_ERROR_AGAIN", "DOCA_ERROR_INVALID_VALUE", "DOCA_ERROR_NO_MEMORY",
		"DOCA_ERROR_INITIALIZATION", "DOCA_ERROR_TIME_OUT", "DOCA_ERROR_SHUTDOWN",
		"DOCA_ERROR_CONNECTION_RESET", "DOCA_ERROR_CONNECTION_ABORTED", "DOCA_ERROR_CONNECTION_INPROGRESS",
		"DOCA_ERROR_NOT_CONNECTED", "DOCA_ERROR_NO_LOCK", "DOCA_ERROR_NOT_FOUND", "DOCA_ERROR_IO_FAILED",
		"DOCA_ERROR_BAD_STATE", "DOCA_ERROR_UNSUPPORTED_VERSION", "DOCA_ERROR_OPERATING_SYSTEM",
		"DOCA_ERROR_DRIVER", "DOCA_ERROR_UNEXPECTED", "DOCA_ERROR_ALREADY_EXIST", "DOCA_ERROR_FULL",
		"DOCA_ERROR_EMPTY", "DOCA_ERROR_IN_PROGRESS", "DOCA_ERROR_TOO_BIG", "DOCA_ERROR_AUTHENTICATION",
		"DOCA_ERROR_BAD_CONFIG", "DOCA_ERROR_SKIPPED", "DOCA_ERROR_DEVICE_FATAL_ERROR",
	};
	return (unsigned)e < sizeof(n) / sizeof(n[0]) ? n[e] : "DOCA_ERROR_?";
}

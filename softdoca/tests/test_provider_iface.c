/*
 * The provider interface's own rules (src/providers/provider.c), without a
 * provider: the checks that a provider table and an instance's capabilities
 * keep the rules of provider.h (sd_prov_ops_check, sd_prov_caps_check), the
 * blob header codec on every malformed input it must refuse, and the refusal
 * codes, whose values are part of native's wire. Links provider.o directly
 * (its symbols are hidden in libsoftdoca).
 */
#include "check.h"
#include "providers/provider.h"

#include <stdint.h>
#include <stdlib.h>

/* A table with every member set: the functions are never called. */
static doca_error_t f_probe(struct sd_prov_why *w) { (void)w; return DOCA_SUCCESS; }
#define STUB(m) .m = (void *)(uintptr_t)f_probe
static const struct sd_provider_ops full = {
	.name = "fake",
	.abi = SD_PROV_ABI,
	.probe = f_probe,
	STUB(open), STUB(close), STUB(query_caps), STUB(progress), STUB(get_fd), STUB(arm), STUB(reg_mem),
	STUB(dereg_mem), STUB(rkey_import), STUB(rkey_release), STUB(conn_create), STUB(conn_export),
	STUB(conn_connect), STUB(listen), STUB(listener_close), STUB(accept), STUB(reject), STUB(connect_addr),
	STUB(conn_set_ctx), STUB(conn_transport), STUB(conn_close), STUB(closing), STUB(write), STUB(read),
	STUB(atomic_fadd), STUB(atomic_cswap), STUB(send), STUB(write_imm), STUB(flush), STUB(rx_resume),
};
#undef STUB

static struct sd_prov_caps caps_of(uint32_t flags)
{
	struct sd_prov_caps c;

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "fake");
	c.flags = flags;
	c.max_iov = 4;
	c.max_msg = 1u << 20;
	return c;
}

static void test_ops_check(void)
{
	struct sd_provider_ops o;
	struct sd_prov_why w;

	memset(&w, 0, sizeof(w));
	RC(sd_prov_ops_check(&full, &w), DOCA_SUCCESS);
	o = full;
	o.abi = SD_PROV_ABI + 1;
	RC(sd_prov_ops_check(&o, &w), DOCA_ERROR_UNSUPPORTED_VERSION);
	CHECK(strstr(w.msg, "fake") && strstr(w.msg, "ABI") && strstr(w.msg, "rebuild"),
	      "another ABI names the provider, the ABIs and the fix: %s", w.msg);
	o = full;
	o.write_imm = NULL;
	RC(sd_prov_ops_check(&o, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "write_imm()") != NULL, "a missing member is named: %s", w.msg);
	o = full;
	o.rx_resume = NULL;
	RC(sd_prov_ops_check(&o, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "rx_resume()") != NULL, "the last member is checked too: %s", w.msg);
	o = full;
	o.listen = NULL; /* CM is a capability: its members are checked against the caps */
	o.get_fd = NULL;
	RC(sd_prov_ops_check(&o, &w), DOCA_SUCCESS);
	o = full;
	o.name = "";
	RC(sd_prov_ops_check(&o, &w), DOCA_ERROR_INVALID_VALUE);
	o.name = "a-name-longer-than-sixteen";
	RC(sd_prov_ops_check(&o, &w), DOCA_ERROR_INVALID_VALUE);
	RC(sd_prov_ops_check(NULL, &w), DOCA_ERROR_INVALID_VALUE);
	for (int i = 0; i < 2; i++) { /* the providers built in keep the rules */
		const char *name = i ? "ofi" : "ucx";
		const struct sd_provider_ops *real = sd_provider_find(name);

		if (real)
			CHECK(sd_prov_ops_check(real, &w) == DOCA_SUCCESS && !strcmp(real->name, name),
			      "provider %s's table passes the checks", name);
		else
			printf("skip provider %s: not built in\n", name);
	}
	CHECK(sd_provider_find("native") == NULL && sd_provider_find(NULL) == NULL && sd_provider_find("") == NULL,
	      "native is not a table (yet), and no name finds nothing");
}

static void test_caps_check(void)
{
	const uint32_t need = SD_PROV_CAP_OOB | SD_PROV_CAP_FD;
	struct sd_provider_ops o;
	struct sd_prov_caps c;
	struct sd_prov_why w;

	memset(&w, 0, sizeof(w));
	c = caps_of(SD_PROV_CAP_OOB | SD_PROV_CAP_FD | SD_PROV_CAP_CM);
	RC(sd_prov_caps_check(&full, &c, need, &w), DOCA_SUCCESS);
	c = caps_of(SD_PROV_CAP_FD);
	RC(sd_prov_caps_check(&full, &c, need, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "SD_PROV_CAP_OOB") != NULL, "a needed capability it lacks is named: %s", w.msg);
	RC(sd_prov_caps_check(&full, &c, SD_PROV_CAP_FD, &w), DOCA_SUCCESS);
	o = full;
	o.accept = NULL;
	c = caps_of(SD_PROV_CAP_OOB | SD_PROV_CAP_FD | SD_PROV_CAP_CM);
	RC(sd_prov_caps_check(&o, &c, need, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "SD_PROV_CAP_CM") && strstr(w.msg, "accept()"),
	      "a claimed capability without its member: %s", w.msg);
	c = caps_of(SD_PROV_CAP_OOB | SD_PROV_CAP_FD);
	RC(sd_prov_caps_check(&o, &c, need, &w), DOCA_SUCCESS);
	o = full;
	o.arm = NULL;
	RC(sd_prov_caps_check(&o, &c, need, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "arm()") != NULL, "FD without arm(): %s", w.msg);
	c = caps_of(SD_PROV_CAP_OOB | SD_PROV_CAP_FD);
	snprintf(c.name, sizeof(c.name), "other");
	RC(sd_prov_caps_check(&full, &c, need, &w), DOCA_ERROR_INVALID_VALUE);
	c = caps_of(SD_PROV_CAP_OOB | SD_PROV_CAP_FD);
	c.max_iov = 0;
	RC(sd_prov_caps_check(&full, &c, need, &w), DOCA_ERROR_INVALID_VALUE);
}

/* A sealed blob of provider prov with a body of n bytes of 0x5a. */
static uint8_t *blob_of(const char *prov, enum sd_prov_blob_kind kind, uint32_t n, uint32_t *len)
{
	uint8_t *b;

	*len = SD_PROV_BLOB_HDR_LEN + n;
	b = malloc(*len);
	if (!b)
		abort();
	sd_prov_blob_begin(b, prov, kind, *len);
	memset(b + SD_PROV_BLOB_HDR_LEN, 0x5a, n);
	sd_prov_blob_seal(b, *len);
	return b;
}

static void test_blobs(void)
{
	const uint8_t *body = NULL;
	size_t body_len = 0;
	struct sd_prov_why w;
	char name[SD_PROV_NAME_LEN + 1];
	uint32_t len;
	uint8_t *b = blob_of("fake", SD_PROV_BLOB_RKEY, 24, &len);

	memset(&w, 0, sizeof(w));
	RC(sd_prov_blob_check(b, len, "fake", SD_PROV_BLOB_RKEY, &body, &body_len, &w), DOCA_SUCCESS);
	CHECK(body == b + SD_PROV_BLOB_HDR_LEN && body_len == 24, "the body is found (%zu bytes)", body_len);
	sd_prov_blob_provider(b, len, name);
	CHECK(strcmp(name, "fake") == 0, "the blob names its provider: %s", name);
	RC(sd_prov_blob_check(b, len, "other", SD_PROV_BLOB_RKEY, &body, &body_len, &w), DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(w.msg, "fake") && strstr(w.msg, "other"), "another provider's blob names both: %s", w.msg);
	RC(sd_prov_blob_check(b, len, "fake", SD_PROV_BLOB_ADDR, &body, &body_len, &w), DOCA_ERROR_INVALID_VALUE);
	{
		uint32_t cut, bad = 0;

		for (cut = 0; cut < len; cut++) /* every truncation, the header's included */
			if (sd_prov_blob_check(b, cut, "fake", SD_PROV_BLOB_RKEY, &body, &body_len, &w) !=
			    DOCA_ERROR_INVALID_VALUE)
				bad++;
		CHECK(bad == 0, "a blob cut to any of its %u shorter lengths is refused as invalid (%u were not)", len,
		      bad);
	}
	b[SD_PROV_BLOB_HDR_LEN + 3] ^= 1; /* a flipped bit of the body: the crc */
	RC(sd_prov_blob_check(b, len, "fake", SD_PROV_BLOB_RKEY, &body, &body_len, &w), DOCA_ERROR_INVALID_VALUE);
	b[SD_PROV_BLOB_HDR_LEN + 3] ^= 1;
	b[4] = SD_PROV_BLOB_VERSION + 1; /* another format version, resealed */
	sd_prov_blob_seal(b, len);
	RC(sd_prov_blob_check(b, len, "fake", SD_PROV_BLOB_RKEY, &body, &body_len, &w),
	   DOCA_ERROR_UNSUPPORTED_VERSION);
	RC(sd_prov_blob_check(NULL, 0, "fake", SD_PROV_BLOB_RKEY, &body, &body_len, &w), DOCA_ERROR_INVALID_VALUE);
	free(b);
}

/* The refusal codes travel on native's wire (an error response's arg0): never renumbered. */
static void test_nak_codes(void)
{
	CHECK(SD_PROV_NAK_NONE == 0 && SD_PROV_NAK_CTX_PERM == 1 && SD_PROV_NAK_INSTANCE == 2 &&
		      SD_PROV_NAK_NO_MAP == 3 && SD_PROV_NAK_KEY == 4 && SD_PROV_NAK_BOUNDS == 5 &&
		      SD_PROV_NAK_MAP_PERM == 6 && SD_PROV_NAK_NOT_STARTED == 7 && SD_PROV_NAK_ALIGN == 8 &&
		      SD_PROV_NAK_RECV_ROOM == 9 && SD_PROV_NAK_NUM == 10,
	      "the refusal codes keep their wire values");
}

int main(void)
{
	test_ops_check();
	test_caps_check();
	test_blobs();
	test_nak_codes();
	return check_summary("test_provider_iface");
}

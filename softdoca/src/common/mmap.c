/* Memory maps: local maps (registered while started, for the RDMA engine) and
 * remote maps created from an export descriptor. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- registry */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static struct doca_mmap **reg_maps;
static size_t reg_num, reg_cap;
static _Atomic uint64_t next_map_id = 1;

/* ---------------------------------------------------------------- the RDMA layer's handlers */
static const struct sd_mmap_hooks no_hooks;
static const struct sd_mmap_hooks *mmap_hooks = &no_hooks;

void sd_mmap_set_hooks(const struct sd_mmap_hooks *hooks)
{
	__atomic_store_n(&mmap_hooks, hooks ? hooks : &no_hooks, __ATOMIC_RELEASE);
}

static const struct sd_mmap_hooks *hooks(void)
{
	return __atomic_load_n(&mmap_hooks, __ATOMIC_ACQUIRE);
}

static void reg_prepare(void) { pthread_mutex_lock(&reg_lock); }
static void reg_after(void) { pthread_mutex_unlock(&reg_lock); }

static void reg_init(void)
{
	pthread_condattr_t a;

	pthread_atfork(reg_prepare, reg_after, reg_after);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&reg_cond, &a);
	pthread_condattr_destroy(&a);
}

static int reg_add(struct doca_mmap *m)
{
	int rc = 0;

	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_lock);
	if (reg_num == reg_cap) {
		size_t cap = reg_cap ? reg_cap * 2 : 16;
		struct doca_mmap **n = realloc(reg_maps, cap * sizeof(*n));
		if (!n) {
			rc = -1;
			goto out;
		}
		reg_maps = n;
		reg_cap = cap;
	}
	reg_maps[reg_num++] = m;
	m->registered = 1;
out:
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

/* Caller holds reg_lock. */
static void reg_remove_locked(struct doca_mmap *m)
{
	for (size_t i = 0; i < reg_num; i++) {
		if (reg_maps[i] == m) {
			reg_maps[i] = reg_maps[--reg_num];
			break;
		}
	}
	m->registered = 0;
	if (reg_num == 0) {
		free(reg_maps);
		reg_maps = NULL;
		reg_cap = 0;
	}
}

static int key_equal(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;

	for (int i = 0; i < SD_KEY_LEN; i++)
		d |= (uint8_t)(a[i] ^ b[i]);
	return d == 0;
}

doca_error_t sd_mmap_acquire_why(uint64_t id, const uint8_t key[SD_KEY_LEN], uint64_t addr, uint64_t len,
				 uint32_t need_perm, struct doca_mmap **out, struct sd_acquire_why *why)
{
	struct doca_mmap *m = NULL;
	doca_error_t rc = DOCA_SUCCESS;
	struct sd_acquire_why w = {0};

	if (!key || !out)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < reg_num; i++) {
		if (reg_maps[i]->id == id) {
			m = reg_maps[i];
			break;
		}
	}
	if (!m) {
		rc = DOCA_ERROR_NOT_FOUND;
		w.code = SD_ACQ_NO_MAP;
	} else if (!key_equal(m->key, key)) {
		rc = DOCA_ERROR_NOT_PERMITTED;
		w.code = SD_ACQ_KEY;
	} else {
		uint64_t base = (uint64_t)(uintptr_t)m->addr;

		/* the key matched: the requester may learn the map's shape */
		w.base = base;
		w.len = m->len;
		w.perms = m->permissions;
		if (addr + len < addr || len > m->len || addr < base || addr - base > m->len - len) {
			rc = DOCA_ERROR_NOT_PERMITTED;
			w.code = SD_ACQ_BOUNDS;
		} else if ((m->permissions & need_perm) != need_perm) {
			rc = DOCA_ERROR_NOT_PERMITTED;
			w.code = SD_ACQ_PERM;
		}
	}
	if (rc == DOCA_SUCCESS) {
		atomic_fetch_add(&m->engine_refs, 1);
		*out = m;
	}
	pthread_mutex_unlock(&reg_lock);
	if (why)
		*why = w;
	return rc;
}

doca_error_t sd_mmap_acquire(uint64_t id, const uint8_t key[SD_KEY_LEN], uint64_t addr, uint64_t len,
			     uint32_t need_perm, struct doca_mmap **out)
{
	return sd_mmap_acquire_why(id, key, addr, len, need_perm, out, NULL);
}

doca_error_t sd_mmap_acquire_inst(uint64_t instance, uint64_t id, const uint8_t key[SD_KEY_LEN],
				  uint64_t addr, uint64_t len, uint32_t need_perm, struct doca_mmap **out)
{
	if (instance != sd_instance_id())
		return DOCA_ERROR_NOT_PERMITTED;
	return sd_mmap_acquire(id, key, addr, len, need_perm, out);
}

void sd_mmap_release(struct doca_mmap *map)
{
	if (!map)
		return;
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_lock);
	if (atomic_fetch_sub(&map->engine_refs, 1) == 1)
		pthread_cond_broadcast(&reg_cond);
	pthread_mutex_unlock(&reg_lock);
}

/* Unregister and wait (bounded) until no engine op touches the map. */
static doca_error_t reg_drain(struct doca_mmap *m)
{
	uint64_t ms = sd_env_ms("SOFTDOCA_TIMEOUT_MS", 5000);
	struct timespec dl;
	doca_error_t rc = DOCA_SUCCESS;
	const struct sd_mmap_hooks *h = hooks();

	if (h->xport_revoke) /* same-host transport first: no peer copy after this */
		h->xport_revoke(m);
	if (h->prov_revoke)
		h->prov_revoke(m);
	pthread_once(&reg_once, reg_init);
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)(ms / 1000);
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&reg_lock);
	if (m->registered)
		reg_remove_locked(m);
	while (atomic_load(&m->engine_refs) > 0) {
		if (pthread_cond_timedwait(&reg_cond, &reg_lock, &dl) == ETIMEDOUT) {
			if (atomic_load(&m->engine_refs) > 0)
				rc = DOCA_ERROR_TIME_OUT;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

/* ---------------------------------------------------------------- descriptor */
void sd_mmap_desc_encode(const struct sd_mmap_desc *d, uint8_t out[SD_MMAP_DESC_LEN])
{
	uint8_t *p = out;

	sd_put_le32(p, SD_MMAP_DESC_MAGIC), p += 4;
	sd_put_le16(p, SD_MMAP_DESC_VERSION), p += 2;
	sd_put_le16(p, SD_MMAP_DESC_LEN), p += 2;
	sd_put_le64(p, d->instance), p += 8;
	sd_put_le64(p, d->id), p += 8;
	sd_put_le64(p, d->addr), p += 8;
	sd_put_le64(p, d->len), p += 8;
	sd_put_le32(p, d->permissions), p += 4;
	memcpy(p, d->key, SD_KEY_LEN), p += SD_KEY_LEN;
	memcpy(p, d->ip, 16), p += 16;
	sd_put_le16(p, d->port), p += 2;
	sd_put_le32(p, sd_crc32(out, (size_t)(p - out)));
}

doca_error_t sd_mmap_desc_parse(const void *buf, size_t len, struct sd_mmap_desc *out)
{
	const uint8_t *p = buf;
	struct sd_mmap_desc d;

	if (!buf || !out || len != SD_MMAP_DESC_LEN)
		return DOCA_ERROR_INVALID_VALUE;
	if (sd_get_le32(p) != SD_MMAP_DESC_MAGIC || sd_get_le16(p + 4) != SD_MMAP_DESC_VERSION ||
	    sd_get_le16(p + 6) != SD_MMAP_DESC_LEN)
		return DOCA_ERROR_INVALID_VALUE;
	if (sd_get_le32(p + SD_MMAP_DESC_LEN - 4) != sd_crc32(p, SD_MMAP_DESC_LEN - 4))
		return DOCA_ERROR_INVALID_VALUE;
	p += 8;
	d.instance = sd_get_le64(p), p += 8;
	d.id = sd_get_le64(p), p += 8;
	d.addr = sd_get_le64(p), p += 8;
	d.len = sd_get_le64(p), p += 8;
	d.permissions = sd_get_le32(p), p += 4;
	memcpy(d.key, p, SD_KEY_LEN), p += SD_KEY_LEN;
	memcpy(d.ip, p, 16), p += 16;
	d.port = sd_get_le16(p);
	if (d.len == 0 || d.addr + d.len < d.addr || (d.permissions & ~SD_ACCESS_MASK))
		return DOCA_ERROR_INVALID_VALUE;
	if (sizeof(uintptr_t) < 8 && (d.addr + d.len) > (uint64_t)UINTPTR_MAX)
		return DOCA_ERROR_INVALID_VALUE;
	*out = d;
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- helpers */
static int live(const struct doca_mmap *m)
{
	return m && sd_handle_live_kind(m, SD_H_MMAP);
}

#define CHECK_MMAP(m) SD_CHECK_HANDLE(m, live)

static struct doca_mmap *mmap_alloc(void)
{
	struct doca_mmap *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	pthread_mutex_init(&m->lock, NULL);
	m->permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
	m->max_devs = SD_MAX_DEVS_DEFAULT;
	atomic_init(&m->num_bufs, 0);
	atomic_init(&m->engine_refs, 0);
	if (sd_handle_add_kind(m, SD_H_MMAP) != 0) {
		pthread_mutex_destroy(&m->lock);
		free(m);
		return NULL;
	}
	return m;
}

static int has_dev(const struct doca_mmap *m, const struct doca_dev *dev)
{
	for (uint32_t i = 0; i < m->num_devs; i++)
		if (m->devs[i] == dev)
			return 1;
	return 0;
}

static doca_error_t add_dev_locked(struct doca_mmap *m, struct doca_dev *dev)
{
	if (has_dev(m, dev))
		return DOCA_ERROR_ALREADY_EXIST;
	if (m->num_devs >= m->max_devs)
		return DOCA_ERROR_NO_MEMORY;
	if (!m->devs) {
		m->devs = calloc(m->max_devs, sizeof(*m->devs));
		if (!m->devs)
			return DOCA_ERROR_NO_MEMORY;
	}
	m->devs[m->num_devs++] = dev;
	atomic_fetch_add(&dev->refs, 1);
	return DOCA_SUCCESS;
}

/* ---------------------------------------------------------------- API */
SD_EXPORT doca_error_t doca_mmap_create(struct doca_mmap **mmap)
{
	if (!mmap)
		return DOCA_ERROR_INVALID_VALUE;
	*mmap = mmap_alloc();
	return *mmap ? DOCA_SUCCESS : DOCA_ERROR_NO_MEMORY;
}

static void mmap_free(struct doca_mmap *m)
{
	if (hooks()->prov_revoke && (m->prov_mr || m->prov_rkey || m->prov_blob))
		hooks()->prov_revoke(m);
	pthread_mutex_destroy(&m->lock);
	free(m->devs);
	free(m->export_blob);
	free(m);
}

void sd_mmap_buf_put(struct doca_mmap *m)
{
	/* the last buf of a map destroyed with bufs out (thread-safe) frees it */
	if (atomic_fetch_sub(&m->num_bufs, 1) == (SD_MMAP_DEAD | 1))
		mmap_free(m);
}

SD_EXPORT doca_error_t doca_mmap_destroy(struct doca_mmap *mmap)
{
	doca_mmap_memrange_free_cb_t *free_cb;
	void *free_opaque, *addr;
	size_t len;

	CHECK_MMAP(mmap);
	pthread_mutex_lock(&mmap->lock);
	/* DOCA: buffers still pointing into the map -> NOT_PERMITTED (unless
	 * thread safety is enabled); a started map is stopped implicitly
	 * (unregistered, engine ops drained). */
	if (atomic_load(&mmap->num_bufs) > 0 && !mmap->thread_safe) {
		pthread_mutex_unlock(&mmap->lock);
		return DOCA_ERROR_NOT_PERMITTED;
	}
	if (mmap->started && !mmap->remote) {
		doca_error_t rc = reg_drain(mmap);

		if (rc != DOCA_SUCCESS) {
			pthread_mutex_unlock(&mmap->lock);
			return rc;
		}
	}
	mmap->started = 0;
	if (atomic_load(&mmap->engine_refs) > 0) {
		pthread_mutex_unlock(&mmap->lock);
		return DOCA_ERROR_IN_USE;
	}
	sd_handle_del(mmap);
	for (uint32_t i = 0; i < mmap->num_devs; i++)
		atomic_fetch_sub(&mmap->devs[i]->refs, 1);
	mmap->num_devs = 0;
	free_cb = mmap->was_started && !mmap->remote ? mmap->free_cb : NULL;
	free_opaque = mmap->free_opaque;
	addr = mmap->addr;
	len = mmap->len;
	pthread_mutex_unlock(&mmap->lock);
	if (free_cb) /* DOCA: the memory range is freed on destroy of a started map */
		free_cb(addr, len, free_opaque);
	/* bufs still out (thread-safe map): the last one released frees the struct */
	if ((atomic_fetch_or(&mmap->num_bufs, SD_MMAP_DEAD) & ~SD_MMAP_DEAD) == 0)
		mmap_free(mmap);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_start(struct doca_mmap *mmap)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started) {
		rc = DOCA_ERROR_BAD_STATE;
	} else if (mmap->remote) {
		mmap->started = 1;
	} else if (!mmap->addr || !mmap->len || mmap->num_devs == 0) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		mmap->id = atomic_fetch_add(&next_map_id, 1);
		if (mmap->token_set) /* doca_mmap_set_export_access_token */
			memcpy(mmap->key, mmap->token, SD_KEY_LEN);
		else if (sd_random_bytes(mmap->key, SD_KEY_LEN) != 0)
			rc = DOCA_ERROR_OPERATING_SYSTEM;
		if (rc == DOCA_SUCCESS && reg_add(mmap) != 0)
			rc = DOCA_ERROR_NO_MEMORY;
		if (rc == DOCA_SUCCESS && hooks()->prov_publish) {
			rc = hooks()->prov_publish(mmap); /* SOFTDOCA_PROVIDER: register with it */
			if (rc != DOCA_SUCCESS)
				reg_drain(mmap);
		}
		if (rc == DOCA_SUCCESS) {
			mmap->started = 1;
			mmap->was_started = 1;
			if (hooks()->xport_publish) /* same-host transport (rdma/rdma_xport.c) */
				hooks()->xport_publish(mmap);
		}
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_stop(struct doca_mmap *mmap)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	pthread_mutex_lock(&mmap->lock);
	if (!mmap->started)
		rc = DOCA_ERROR_BAD_STATE;
	else if (atomic_load(&mmap->num_bufs) > 0)
		rc = DOCA_ERROR_NOT_PERMITTED;
	else if (!mmap->remote)
		rc = reg_drain(mmap);
	if (rc == DOCA_SUCCESS)
		mmap->started = 0;
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_add_dev(struct doca_mmap *mmap, struct doca_dev *dev)
{
	doca_error_t rc;

	CHECK_MMAP(mmap);
	if (!dev)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	pthread_mutex_lock(&mmap->lock);
	rc = mmap->started ? DOCA_ERROR_BAD_STATE : add_dev_locked(mmap, dev);
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_rm_dev(struct doca_mmap *mmap, struct doca_dev *dev)
{
	doca_error_t rc = DOCA_ERROR_NOT_FOUND;

	CHECK_MMAP(mmap);
	if (!dev)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		for (uint32_t i = 0; i < mmap->num_devs; i++) {
			if (mmap->devs[i] == dev) {
				mmap->devs[i] = mmap->devs[--mmap->num_devs];
				atomic_fetch_sub(&dev->refs, 1);
				rc = DOCA_SUCCESS;
				break;
			}
		}
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_export_rdma(struct doca_mmap *mmap, const struct doca_dev *dev,
					     const void **export_desc, size_t *export_desc_len)
{
	struct sd_mmap_desc d;
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (!dev || !export_desc || !export_desc_len)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->remote) {
		rc = DOCA_ERROR_NOT_PERMITTED;
		goto out;
	}
	if (!mmap->started || !mmap->registered) {
		rc = DOCA_ERROR_BAD_STATE;
		goto out;
	}
	if (!has_dev(mmap, dev)) {
		rc = DOCA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (!mmap->export_blob) { /* the native descriptor, then the provider's key if registered with one */
		mmap->export_blob = malloc(SD_MMAP_DESC_LEN + mmap->prov_blob_len);
		if (!mmap->export_blob) {
			rc = DOCA_ERROR_NO_MEMORY;
			goto out;
		}
	}
	memset(&d, 0, sizeof(d));
	d.instance = sd_instance_id();
	d.id = mmap->id;
	d.addr = (uint64_t)(uintptr_t)mmap->addr;
	d.len = mmap->len;
	d.permissions = mmap->permissions;
	memcpy(d.key, mmap->key, SD_KEY_LEN);
	if (dev->info.has_ipv4) {
		d.ip[10] = d.ip[11] = 0xff;
		memcpy(d.ip + 12, dev->info.ipv4, 4);
	} else if (dev->info.has_ipv6) {
		memcpy(d.ip, dev->info.ipv6, 16);
	}
	d.port = 0;
	sd_mmap_desc_encode(&d, mmap->export_blob);
	if (mmap->prov_blob_len)
		memcpy(mmap->export_blob + SD_MMAP_DESC_LEN, mmap->prov_blob, mmap->prov_blob_len);
	mmap->export_len = SD_MMAP_DESC_LEN + mmap->prov_blob_len;
	mmap->exported = 1;
	*export_desc = mmap->export_blob;
	*export_desc_len = mmap->export_len;
out:
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_create_from_export(const union doca_data *user_data, const void *export_desc,
						    size_t export_desc_len, struct doca_dev *dev,
						    struct doca_mmap **mmap)
{
	struct sd_mmap_desc d;
	struct doca_mmap *m;
	doca_error_t rc;

	if (!export_desc || !dev || !mmap)
		return DOCA_ERROR_INVALID_VALUE;
	if (!sd_handle_live_kind(dev, SD_H_DEV))
		return DOCA_ERROR_BAD_STATE;
	/* a provider's key may follow the native descriptor (SOFTDOCA_PROVIDER) */
	rc = sd_mmap_desc_parse(export_desc, export_desc_len > SD_MMAP_DESC_LEN ? SD_MMAP_DESC_LEN : export_desc_len,
				&d);
	if (rc != DOCA_SUCCESS)
		return rc;
	if (export_desc_len > SD_MMAP_DESC_LEN && !hooks()->prov_import)
		return DOCA_ERROR_INVALID_VALUE;
	m = mmap_alloc();
	if (!m)
		return DOCA_ERROR_NO_MEMORY;
	if (export_desc_len > SD_MMAP_DESC_LEN) {
		rc = hooks()->prov_import(m, (const uint8_t *)export_desc + SD_MMAP_DESC_LEN,
					  export_desc_len - SD_MMAP_DESC_LEN);
		if (rc != DOCA_SUCCESS) {
			mmap_free(m);
			return rc;
		}
	}
	m->remote = 1;
	m->started = 1;
	m->addr = (uint8_t *)(uintptr_t)d.addr;
	m->len = (size_t)d.len;
	m->permissions = d.permissions;
	m->id = d.id;
	memcpy(m->key, d.key, SD_KEY_LEN);
	m->peer_instance = d.instance;
	m->rkey.instance = d.instance;
	m->rkey.id = d.id;
	memcpy(m->rkey.key, d.key, SD_KEY_LEN);
	memcpy(m->peer_addr, d.ip, 16);
	m->peer_port = d.port;
	if (user_data)
		m->user_data = *user_data;
	rc = add_dev_locked(m, dev);
	if (rc != DOCA_SUCCESS) {
		m->started = 0;
		doca_mmap_destroy(m);
		return rc;
	}
	*mmap = m;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_set_memrange(struct doca_mmap *mmap, void *addr, size_t len)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (!addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started || mmap->remote) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		mmap->addr = addr;
		mmap->len = len;
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_get_memrange(const struct doca_mmap *mmap, void **addr, size_t *len)
{
	CHECK_MMAP(mmap);
	if (!addr || !len)
		return DOCA_ERROR_INVALID_VALUE;
	if (!mmap->addr && !mmap->len)
		return DOCA_ERROR_BAD_STATE;
	*addr = mmap->addr;
	*len = mmap->len;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_get_user_data(const struct doca_mmap *mmap, union doca_data *user_data)
{
	CHECK_MMAP(mmap);
	if (!user_data)
		return DOCA_ERROR_INVALID_VALUE;
	*user_data = mmap->user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_set_user_data(struct doca_mmap *mmap, union doca_data user_data)
{
	CHECK_MMAP(mmap);
	mmap->user_data = user_data;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_set_max_num_devices(struct doca_mmap *mmap, uint32_t max_num_devices)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (max_num_devices == 0)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started) {
		rc = DOCA_ERROR_NOT_PERMITTED; /* doca_mmap.h: after the first start */
	} else if (max_num_devices < mmap->num_devs) {
		rc = DOCA_ERROR_INVALID_VALUE;
	} else {
		struct doca_dev **n = calloc(max_num_devices, sizeof(*n));
		if (!n) {
			rc = DOCA_ERROR_NO_MEMORY;
		} else {
			if (mmap->num_devs)
				memcpy(n, mmap->devs, mmap->num_devs * sizeof(*n));
			free(mmap->devs);
			mmap->devs = n;
			mmap->max_devs = max_num_devices;
		}
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_set_permissions(struct doca_mmap *mmap, uint32_t access_mask)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (access_mask & ~SD_ACCESS_MASK)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started || mmap->remote)
		rc = DOCA_ERROR_BAD_STATE;
	else
		mmap->permissions = access_mask;
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

/* ---------------------------------------------------------------- DOCA 3.3 additions */

/* PCI export (DOCA Comch / DMA between host and DPU over PCIe): softdoca
 * devices are no PCIe functions of a DPU (doca_mmap_cap_is_export_pci_supported
 * answers 0), so this fails as doca_mmap.h guarantees: NOT_SUPPORTED. */
SD_EXPORT doca_error_t doca_mmap_export_pci(struct doca_mmap *mmap, const struct doca_dev *dev,
					    const void **export_desc, size_t *export_desc_len)
{
	CHECK_MMAP(mmap);
	if (!dev || !export_desc || !export_desc_len)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

/* No DPA in softdoca. */
SD_EXPORT doca_error_t doca_mmap_dev_get_dpa_handle(struct doca_mmap *mmap, const struct doca_dev *dev,
						    doca_dpa_dev_mmap_t *dpa_mmap_handle)
{
	CHECK_MMAP(mmap);
	if (!dev || !dpa_mmap_handle)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

/* Common checks of the set_*memrange family (DOCA order: input, started, already set). */
static doca_error_t memrange_settable(struct doca_mmap *mmap)
{
	doca_error_t rc = DOCA_SUCCESS;

	pthread_mutex_lock(&mmap->lock);
	if (mmap->started || mmap->remote)
		rc = DOCA_ERROR_BAD_STATE;
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

/* dmabuf (device memory, e.g. a GPU's): softdoca moves data with the CPU and
 * cannot map a dmabuf's pages: NOT_SUPPORTED. */
SD_EXPORT doca_error_t doca_mmap_set_dmabuf_memrange(struct doca_mmap *mmap, int dmabuf_fd, void *addr,
						     size_t dmabuf_offset, size_t len)
{
	doca_error_t rc;

	CHECK_MMAP(mmap);
	if (dmabuf_fd < 0 || !addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr ||
	    dmabuf_offset + len < dmabuf_offset)
		return DOCA_ERROR_INVALID_VALUE;
	rc = memrange_settable(mmap);
	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

/* DPA heap memory: no DPA in softdoca (no struct doca_dpa can exist). */
SD_EXPORT doca_error_t doca_mmap_set_dpa_memrange(struct doca_mmap *mmap, struct doca_dpa *dpa, uint64_t dpa_addr,
						  size_t len)
{
	doca_error_t rc;

	CHECK_MMAP(mmap);
	if (!dpa || len == 0 || dpa_addr + len < dpa_addr)
		return DOCA_ERROR_INVALID_VALUE;
	rc = memrange_settable(mmap);
	return rc != DOCA_SUCCESS ? rc : DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_mmap_set_free_cb(struct doca_mmap *mmap, doca_mmap_memrange_free_cb_t *free_cb,
					     void *opaque)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (!free_cb)
		return DOCA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started || mmap->remote) {
		rc = DOCA_ERROR_BAD_STATE;
	} else {
		mmap->free_cb = free_cb;
		mmap->free_opaque = opaque;
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

SD_EXPORT doca_error_t doca_mmap_get_max_num_devices(const struct doca_mmap *mmap, uint32_t *max_num_devices)
{
	CHECK_MMAP(mmap);
	if (!max_num_devices)
		return DOCA_ERROR_INVALID_VALUE;
	*max_num_devices = mmap->max_devs;
	return DOCA_SUCCESS;
}

/* A memory key is a NIC's (an mlx5 lkey/rkey for GPU or DPA work requests);
 * softdoca's maps carry a 128-bit software key instead: NOT_SUPPORTED. */
SD_EXPORT doca_error_t doca_mmap_get_mkey(const struct doca_mmap *mmap, const struct doca_dev *dev, uint32_t *mkey)
{
	CHECK_MMAP(mmap);
	if (!dev || !mkey)
		return DOCA_ERROR_INVALID_VALUE;
	return DOCA_ERROR_NOT_SUPPORTED;
}

SD_EXPORT doca_error_t doca_mmap_get_num_bufs(const struct doca_mmap *mmap, uint32_t *num_bufs)
{
	CHECK_MMAP(mmap);
	if (!num_bufs)
		return DOCA_ERROR_INVALID_VALUE;
	*num_bufs = (uint32_t)(atomic_load(&((struct doca_mmap *)mmap)->num_bufs) & ~SD_MMAP_DEAD);
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_get_exported(const struct doca_mmap *mmap, uint8_t *exported)
{
	CHECK_MMAP(mmap);
	if (!exported)
		return DOCA_ERROR_INVALID_VALUE;
	*exported = mmap->exported ? 1 : 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_get_from_export(const struct doca_mmap *mmap, uint8_t *from_export)
{
	CHECK_MMAP(mmap);
	if (!from_export)
		return DOCA_ERROR_INVALID_VALUE;
	*from_export = mmap->remote ? 1 : 0;
	return DOCA_SUCCESS;
}

/* The token becomes the map's access key (zero-padded to SD_KEY_LEN bytes),
 * checked by the target on every remote operation like the random key it
 * replaces. softdoca keeps one key per map: a different token for a second
 * device is NOT_SUPPORTED (the same token, or a new one for the same device,
 * is accepted). */
SD_EXPORT doca_error_t doca_mmap_set_export_access_token(struct doca_mmap *mmap, const struct doca_dev *dev,
							 const uint8_t *token, size_t token_sz)
{
	uint8_t key[SD_KEY_LEN] = {0};
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	if (!dev || !token || token_sz == 0 || token_sz > SD_KEY_LEN)
		return DOCA_ERROR_INVALID_VALUE;
	memcpy(key, token, token_sz);
	pthread_mutex_lock(&mmap->lock);
	if (mmap->remote || mmap->exported)
		rc = DOCA_ERROR_NOT_PERMITTED;
	else if (mmap->started)
		rc = DOCA_ERROR_BAD_STATE;
	else if (!has_dev(mmap, dev))
		rc = DOCA_ERROR_NOT_FOUND;
	else if (mmap->token_set && mmap->token_dev != dev && memcmp(mmap->token, key, SD_KEY_LEN) != 0)
		rc = DOCA_ERROR_NOT_SUPPORTED;
	if (rc == DOCA_SUCCESS) {
		memcpy(mmap->token, key, SD_KEY_LEN);
		if (!mmap->token_set)
			mmap->token_dev = dev;
		mmap->token_set = 1;
	}
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

/* Capabilities of a soft device. */
SD_EXPORT doca_error_t doca_mmap_cap_is_export_pci_supported(const struct doca_devinfo *devinfo, uint8_t *mmap_export)
{
	if (!devinfo || !mmap_export)
		return DOCA_ERROR_INVALID_VALUE;
	*mmap_export = 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_cap_is_create_from_export_pci_supported(const struct doca_devinfo *devinfo,
									 uint8_t *from_export)
{
	if (!devinfo || !from_export)
		return DOCA_ERROR_INVALID_VALUE;
	*from_export = 0;
	return DOCA_SUCCESS;
}

SD_EXPORT doca_error_t doca_mmap_cap_get_max_export_access_token_size(const struct doca_devinfo *devinfo,
								      size_t *max_sz)
{
	if (!devinfo || !max_sz)
		return DOCA_ERROR_INVALID_VALUE;
	*max_sz = SD_KEY_LEN;
	return DOCA_SUCCESS;
}

/* softdoca's maps are always safe to use from several threads (a lock and
 * atomic counters); what this changes is DOCA's documented contract:
 * doca_mmap_destroy no longer fails while doca_bufs point into the map (the
 * map's bookkeeping then lives on until the last of them is released). */
SD_EXPORT doca_error_t doca_mmap_enable_thread_safety(struct doca_mmap *mmap)
{
	doca_error_t rc = DOCA_SUCCESS;

	CHECK_MMAP(mmap);
	pthread_mutex_lock(&mmap->lock);
	if (mmap->started || atomic_load(&mmap->num_bufs) > 0)
		rc = DOCA_ERROR_NOT_PERMITTED;
	else
		mmap->thread_safe = 1;
	pthread_mutex_unlock(&mmap->lock);
	return rc;
}

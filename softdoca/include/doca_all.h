/* The DOCA API softdoca implements: every cdefs/ file, in the order of cdefs/ORDER.
 * (tests/test_cdefs.py checks that this list and ORDER agree.) */
#ifndef SOFTDOCA_DOCA_ALL_H
#define SOFTDOCA_DOCA_ALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#pragma GCC visibility push(default)
#include "doca_types.h"
#include "doca_error.h"
#include "doca_version.h"
#include "doca_dev.h"
#include "doca_mmap.h"
#include "doca_buf.h"
#include "doca_buf_inventory.h"
#include "doca_buf_pool.h"
#include "doca_pe.h"
#include "doca_ctx.h"
#include "doca_sync_event.h"
#include "doca_rdma.h"
#include "doca_log.h"
#pragma GCC visibility pop

#endif

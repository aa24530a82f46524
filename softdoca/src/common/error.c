/* doca_error_get_name / doca_error_get_descr and the runtime version. */
#include "internal.h"

struct sd_err_entry {
	const char *name;
	const char *descr;
};

static const struct sd_err_entry sd_errors[] = {
	[DOCA_SUCCESS] = {"DOCA_SUCCESS", "Success"},
	[DOCA_ERROR_UNKNOWN] = {"DOCA_ERROR_UNKNOWN", "Unknown error"},
	[DOCA_ERROR_NOT_PERMITTED] = {"DOCA_ERROR_NOT_PERMITTED", "Operation not permitted"},
	[DOCA_ERROR_IN_USE] = {"DOCA_ERROR_IN_USE", "Resource is in use"},
	[DOCA_ERROR_NOT_SUPPORTED] = {"DOCA_ERROR_NOT_SUPPORTED", "Operation not supported"},
	[DOCA_ERROR_AGAIN] = {"DOCA_ERROR_AGAIN", "Resource temporarily unavailable, try again"},
	[DOCA_ERROR_INVALID_VALUE] = {"DOCA_ERROR_INVALID_VALUE", "Invalid input value"},
	[DOCA_ERROR_NO_MEMORY] = {"DOCA_ERROR_NO_MEMORY", "Out of memory or resources"},
	[DOCA_ERROR_INITIALIZATION] = {"DOCA_ERROR_INITIALIZATION", "Initialization failed"},
	[DOCA_ERROR_TIME_OUT] = {"DOCA_ERROR_TIME_OUT", "Operation timed out"},
	[DOCA_ERROR_SHUTDOWN] = {"DOCA_ERROR_SHUTDOWN", "Shutdown in progress"},
	[DOCA_ERROR_CONNECTION_RESET] = {"DOCA_ERROR_CONNECTION_RESET", "Connection reset by peer"},
	[DOCA_ERROR_CONNECTION_ABORTED] = {"DOCA_ERROR_CONNECTION_ABORTED", "Connection aborted"},
	[DOCA_ERROR_CONNECTION_INPROGRESS] = {"DOCA_ERROR_CONNECTION_INPROGRESS", "Connection in progress"},
	[DOCA_ERROR_NOT_CONNECTED] = {"DOCA_ERROR_NOT_CONNECTED", "Not connected"},
	[DOCA_ERROR_NO_LOCK] = {"DOCA_ERROR_NO_LOCK", "Unable to acquire lock"},
	[DOCA_ERROR_NOT_FOUND] = {"DOCA_ERROR_NOT_FOUND", "Resource not found"},
	[DOCA_ERROR_IO_FAILED] = {"DOCA_ERROR_IO_FAILED", "Input/output operation failed"},
	[DOCA_ERROR_BAD_STATE] = {"DOCA_ERROR_BAD_STATE", "Object is in a state that does not allow the operation"},
	[DOCA_ERROR_UNSUPPORTED_VERSION] = {"DOCA_ERROR_UNSUPPORTED_VERSION", "Unsupported version"},
	[DOCA_ERROR_OPERATING_SYSTEM] = {"DOCA_ERROR_OPERATING_SYSTEM", "Operating system call failed"},
	[DOCA_ERROR_DRIVER] = {"DOCA_ERROR_DRIVER", "Driver call failed"},
	[DOCA_ERROR_UNEXPECTED] = {"DOCA_ERROR_UNEXPECTED", "Unexpected internal condition"},
	[DOCA_ERROR_ALREADY_EXIST] = {"DOCA_ERROR_ALREADY_EXIST", "Resource already exists"},
	[DOCA_ERROR_FULL] = {"DOCA_ERROR_FULL", "No more space available"},
	[DOCA_ERROR_EMPTY] = {"DOCA_ERROR_EMPTY", "No entry available"},
	[DOCA_ERROR_IN_PROGRESS] = {"DOCA_ERROR_IN_PROGRESS", "Operation is in progress"},
	[DOCA_ERROR_TOO_BIG] = {"DOCA_ERROR_TOO_BIG", "Requested size is too big"},
	[DOCA_ERROR_AUTHENTICATION] = {"DOCA_ERROR_AUTHENTICATION", "Authentication failed"},
	[DOCA_ERROR_BAD_CONFIG] = {"DOCA_ERROR_BAD_CONFIG", "Bad configuration"},
	[DOCA_ERROR_SKIPPED] = {"DOCA_ERROR_SKIPPED", "Operation was skipped"},
	[DOCA_ERROR_DEVICE_FATAL_ERROR] = {"DOCA_ERROR_DEVICE_FATAL_ERROR", "Device encountered a fatal error"},
};

#define SD_NUM_ERRORS (sizeof(sd_errors) / sizeof(sd_errors[0]))

static const struct sd_err_entry *lookup(doca_error_t error)
{
	unsigned int e = (unsigned int)error;

	if (e >= SD_NUM_ERRORS || !sd_errors[e].name)
		return NULL;
	return &sd_errors[e];
}

SD_EXPORT const char *doca_error_get_name(doca_error_t error)
{
	const struct sd_err_entry *e = lookup(error);

	return e ? e->name : "DOCA_ERROR_UNKNOWN_CODE";
}

SD_EXPORT const char *doca_error_get_descr(doca_error_t error)
{
	const struct sd_err_entry *e = lookup(error);

	return e ? e->descr : "Unrecognized error code";
}

/* -DSOFTDOCA_RUNTIME_VERSION='"3.0.0058"' builds a softdoca that reports another DOCA runtime version. */
#ifndef SOFTDOCA_RUNTIME_VERSION
#define SOFTDOCA_RUNTIME_VERSION "3.3.0 (softdoca)"
#endif

SD_EXPORT const char *doca_version_runtime(void)
{
	return SOFTDOCA_RUNTIME_VERSION;
}

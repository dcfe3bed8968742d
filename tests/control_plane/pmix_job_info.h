/* What a PMIx-native test program reads of its job with PMIx_Get, shared by pmix_native_client
 * and pmix_elastic_client (no Bellows library in either: they are written as such programs are). */
#ifndef BELLOWS_TESTS_PMIX_JOB_INFO_H
#define BELLOWS_TESTS_PMIX_JOB_INFO_H

#include <pmix.h>

#include <stddef.h>

/* PMIx_Get of `key` for `proc` as a number (PMIX_UINT32, PMIX_UINT16, PMIX_PROC_RANK or
 * PMIX_INT), asked of the daemon again when `refresh` is not 0 (PMIX_GET_REFRESH_CACHE). On
 * PMIX_SUCCESS *number holds it; otherwise *number is -1 and the status says why
 * (PMIX_ERR_TYPE_MISMATCH for a value of another type, whose type is then in *type). */
pmix_status_t job_info_number(const pmix_proc_t* proc, const char* key, int refresh, long* number,
                              pmix_data_type_t* type);

/* PMIx_Get of the string `key` for `proc` into out (size bytes, NUL-terminated). On failure out
 * is empty and the status says why (PMIX_ERR_TYPE_MISMATCH for a value of another type, whose
 * type is then in *type). */
pmix_status_t job_info_string(const pmix_proc_t* proc, const char* key, char* out, size_t size,
                              pmix_data_type_t* type);

/* The job's nodes read again from the daemon: PMIX_NODE_LIST (what PMIX_NODE_MAP says) with
 * PMIX_GET_REFRESH_CACHE into out, or "NODE_LIST:STATUS". PMIx 4.2.2's PMIx_Resolve_nodes and
 * PMIx_Resolve_peers answer from the client's cache, which no refresh renews, and a refresh of
 * another node's PMIX_LOCAL_PEERS or of PMIX_PROC_MAP is NOT-FOUND (docs/daemon.md). */
void job_info_refreshed_nodes(const char* nspace, char* out, size_t size);

#endif

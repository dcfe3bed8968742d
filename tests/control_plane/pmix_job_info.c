#include "pmix_job_info.h"

#include <stdio.h>

pmix_status_t job_info_number(const pmix_proc_t* proc, const char* key, int refresh, long* number,
                              pmix_data_type_t* type) {
  *number = -1;
  pmix_info_t info;
  if (refresh) {
    PMIX_INFO_LOAD(&info, PMIX_GET_REFRESH_CACHE, NULL, PMIX_BOOL);
  }
  pmix_value_t* value = NULL;
  pmix_status_t rc = PMIx_Get(proc, key, refresh ? &info : NULL, refresh ? 1 : 0, &value);
  if (refresh) {
    PMIX_INFO_DESTRUCT(&info);
  }
  if (rc == PMIX_SUCCESS && value == NULL) rc = PMIX_ERR_NOT_FOUND;
  if (rc != PMIX_SUCCESS) return rc;
  switch (value->type) {
    case PMIX_UINT32: *number = (long)value->data.uint32; break;
    case PMIX_UINT16: *number = (long)value->data.uint16; break;
    case PMIX_PROC_RANK: *number = (long)value->data.rank; break;
    case PMIX_INT: *number = (long)value->data.integer; break;
    default:
      *type = value->type;
      rc = PMIX_ERR_TYPE_MISMATCH;
      break;
  }
  PMIX_VALUE_RELEASE(value);
  return rc;
}

pmix_status_t job_info_string(const pmix_proc_t* proc, const char* key, char* out, size_t size,
                              pmix_data_type_t* type) {
  out[0] = '\0';
  pmix_value_t* value = NULL;
  pmix_status_t rc = PMIx_Get(proc, key, NULL, 0, &value);
  if (rc == PMIX_SUCCESS && value == NULL) rc = PMIX_ERR_NOT_FOUND;
  if (rc != PMIX_SUCCESS) return rc;
  if (value->type == PMIX_STRING && value->data.string != NULL) {
    snprintf(out, size, "%s", value->data.string);
  } else {
    *type = value->type;
    rc = PMIX_ERR_TYPE_MISMATCH;
  }
  PMIX_VALUE_RELEASE(value);
  return rc;
}

void job_info_refreshed_nodes(const char* nspace, char* out, size_t size) {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, nspace, PMIX_RANK_WILDCARD);
  pmix_info_t refresh;
  PMIX_INFO_LOAD(&refresh, PMIX_GET_REFRESH_CACHE, NULL, PMIX_BOOL);
  pmix_value_t* list = NULL;
  const pmix_status_t rc = PMIx_Get(&job, PMIX_NODE_LIST, &refresh, 1, &list);
  if (rc == PMIX_SUCCESS && list != NULL && list->type == PMIX_STRING && list->data.string != NULL)
    snprintf(out, size, "%s", list->data.string);
  else
    snprintf(out, size, "NODE_LIST:%s", PMIx_Error_string(rc));
  if (list != NULL) PMIX_VALUE_RELEASE(list);
  PMIX_INFO_DESTRUCT(&refresh);
}

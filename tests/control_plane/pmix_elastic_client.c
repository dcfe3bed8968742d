/* A PMIx-native program that takes part in its job's grows and shrinks as the PMIx standard
 * lets it (no Bellows library): its job's ranks are the members of the job's newest process
 * set (PMIX_PROCESS_SET_DEFINE), or at its start the ranks of the job's map.
 *
 *   pmix_elastic_client OUT_DIR
 *
 * At its start and each time the job's ranks change, a rank that is one of them puts a key
 * named after the members ("elastic.0,1,2", its rank + 1), fences with collected data among them
 * all, gets every member's key, re-reads its job (PMIX_JOB_SIZE, PMIX_NUM_NODES and
 * PMIX_NODE_LIST with PMIX_GET_REFRESH_CACHE), then fences with collected
 * data over the whole namespace (PMIX_RANK_WILDCARD, which means the ranks in the job now); it
 * appends one line to OUT_DIR/rank-R.log, with the PMIX_LOCAL_RANK and PMIX_NODE_RANK it read
 * at its start (-1: not found):
 *
 *   members 0,1,2 size 3 num_nodes 3 nodes local0,local1,local2 local_rank 0 node_rank 0 fence ok keys 3 wildcard ok
 *
 * ("fence FAILED-STATUS" when the fence failed, "wildcard FAILED-STATUS" when the second did;
 * without the first, no second: "wildcard NOT-AVAILABLE"). A rank that is not in the new set leaves: it
 * appends "left", calls PMIx_Finalize and exits 0. Every rank ends (PMIx_Finalize, exit 0) once
 * OUT_DIR/stop exists; after 120 s without it, exit 1. Exit 1 too when PMIx_Init fails. */
#include <pmix.h>

#include "pmix_job_info.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_MEMBERS 256

/* The newest set's members, written by the event handler (PMIx's progress thread) and read by
 * main; the generation counts sets received. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pmix_rank_t g_members[MAX_MEMBERS];
static size_t g_nmembers = 0;
static int g_generation = 0;

static void pset_defined(size_t id, pmix_status_t status, const pmix_proc_t* source, pmix_info_t info[],
                         size_t ninfo, pmix_info_t results[], size_t nresults,
                         pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  (void)id; (void)status; (void)source; (void)results; (void)nresults;
  for (size_t i = 0; i < ninfo; ++i) {
    if (!PMIX_CHECK_KEY(&info[i], PMIX_PSET_MEMBERS) || info[i].value.type != PMIX_DATA_ARRAY) continue;
    const pmix_data_array_t* array = info[i].value.data.darray;
    if (array == NULL || array->type != PMIX_PROC) continue;
    const pmix_proc_t* procs = (const pmix_proc_t*)array->array;
    pthread_mutex_lock(&g_lock);
    g_nmembers = 0;
    for (size_t k = 0; k < array->size && k < MAX_MEMBERS; ++k) g_members[g_nmembers++] = procs[k].rank;
    ++g_generation;
    pthread_mutex_unlock(&g_lock);
  }
  if (cbfunc != NULL) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void registered(pmix_status_t status, size_t ref, void* cbdata) {
  (void)ref;
  *(volatile pmix_status_t*)cbdata = status;
}

/* The members of the job's map at the start: every rank PMIx_Resolve_peers gives on its nodes. */
static size_t members_of_map(const char* nspace, pmix_rank_t* members) {
  size_t count = 0;
  char* nodes = NULL;
  if (PMIx_Resolve_nodes(nspace, &nodes) != PMIX_SUCCESS || nodes == NULL) return 0;
  char* saved = NULL;
  for (char* node = strtok_r(nodes, ",", &saved); node != NULL; node = strtok_r(NULL, ",", &saved)) {
    pmix_proc_t* procs = NULL;
    size_t nprocs = 0;
    if (PMIx_Resolve_peers(node, nspace, &procs, &nprocs) != PMIX_SUCCESS) continue;
    for (size_t i = 0; i < nprocs && count < MAX_MEMBERS; ++i) members[count++] = procs[i].rank;
    if (procs != NULL) PMIX_PROC_FREE(procs, nprocs);
  }
  free(nodes);
  /* Ascending, as the sets list them. */
  for (size_t i = 1; i < count; ++i)
    for (size_t k = i; k > 0 && members[k - 1] > members[k]; --k) {
      const pmix_rank_t swap = members[k];
      members[k] = members[k - 1];
      members[k - 1] = swap;
    }
  return count;
}

/* One membership: a key put, a fence among the members, their keys got, the job read again, a
 * fence over the namespace; local_rank and node_rank as read at the start. */
static void take_part(FILE* log, const pmix_proc_t* me, long local_rank, long node_rank, const pmix_rank_t* members,
                      size_t nmembers) {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
  char listed[2048] = "";
  size_t used = 0;
  for (size_t i = 0; i < nmembers && used < sizeof listed; ++i)
    used += (size_t)snprintf(listed + used, sizeof listed - used, "%s%u", i ? "," : "", members[i]);
  char key[PMIX_MAX_KEYLEN + 1];
  snprintf(key, sizeof key, "elastic.%s", listed);
  pmix_value_t mine;
  const uint32_t value = me->rank + 1u;
  PMIX_VALUE_LOAD(&mine, &value, PMIX_UINT32);
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &mine);
  PMIX_VALUE_DESTRUCT(&mine);
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();

  pmix_proc_t participants[MAX_MEMBERS];
  for (size_t i = 0; i < nmembers; ++i) PMIX_LOAD_PROCID(&participants[i], me->nspace, members[i]);
  pmix_info_t collect;
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
  if (rc == PMIX_SUCCESS) rc = PMIx_Fence(participants, nmembers, &collect, 1);
  PMIX_INFO_DESTRUCT(&collect);
  int keys = 0;
  for (size_t i = 0; rc == PMIX_SUCCESS && i < nmembers; ++i) {
    pmix_value_t* got = NULL;
    if (PMIx_Get(&participants[i], key, NULL, 0, &got) == PMIX_SUCCESS && got != NULL &&
        got->type == PMIX_UINT32 && got->data.uint32 == members[i] + 1u)
      ++keys;
    if (got != NULL) PMIX_VALUE_RELEASE(got);
  }
  /* The job read again once every member took part (a rank that joined with a number not below
   * the job's size reads the numbers given as PMIX_JOB_SIZE: docs/daemon.md). */
  pmix_data_type_t type = PMIX_UNDEF;
  long size = -1;
  long num_nodes = -1;
  (void)job_info_number(&job, PMIX_JOB_SIZE, 1, &size, &type);
  (void)job_info_number(&job, PMIX_NUM_NODES, 1, &num_nodes, &type);
  char nodes[4096];
  job_info_refreshed_nodes(me->nspace, nodes, sizeof nodes);
  /* Then a fence over the whole namespace (PMIX_RANK_WILDCARD): the ranks in the job now. */
  pmix_status_t whole = PMIX_ERR_NOT_AVAILABLE;
  if (rc == PMIX_SUCCESS) {
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
    whole = PMIx_Fence(&job, 1, &collect, 1);
    PMIX_INFO_DESTRUCT(&collect);
  }
  fprintf(log, "members %s size %ld num_nodes %ld nodes %s local_rank %ld node_rank %ld fence %s keys %d wildcard %s\n",
          listed, size, num_nodes, nodes, local_rank, node_rank, rc == PMIX_SUCCESS ? "ok" : PMIx_Error_string(rc), keys,
          whole == PMIX_SUCCESS ? "ok" : PMIx_Error_string(whole));
  fflush(log);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: pmix_elastic_client OUT_DIR\n");
    return 2;
  }
  const char* out_dir = argv[1];
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_elastic_client: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  pmix_status_t code = PMIX_PROCESS_SET_DEFINE;
  volatile pmix_status_t handler = PMIX_ERR_TIMEOUT;
  PMIx_Register_event_handler(&code, 1, NULL, 0, pset_defined, registered, (void*)&handler);
  for (int i = 0; i < 500 && handler == PMIX_ERR_TIMEOUT; ++i) usleep(10000);

  char path[4096];
  snprintf(path, sizeof path, "%s/rank-%u.log", out_dir, me.rank);
  FILE* log = fopen(path, "a");
  if (log == NULL) {
    fprintf(stderr, "pmix_elastic_client: cannot write %s\n", path);
    PMIx_Finalize(NULL, 0);
    return 1;
  }
  if (handler != PMIX_SUCCESS) fprintf(log, "handler %s\n", PMIx_Error_string(handler));

  /* Its own place on its node, read at its start, as programs read it (it does not change). */
  pmix_data_type_t type = PMIX_UNDEF;
  long local_rank = -1;
  long node_rank = -1;
  (void)job_info_number(&me, PMIX_LOCAL_RANK, 0, &local_rank, &type);
  (void)job_info_number(&me, PMIX_NODE_RANK, 0, &node_rank, &type);

  pmix_rank_t members[MAX_MEMBERS];
  size_t nmembers = members_of_map(me.nspace, members);
  int seen = 0;
  take_part(log, &me, local_rank, node_rank, members, nmembers);

  char stop[4096];
  snprintf(stop, sizeof stop, "%s/stop", out_dir);
  const double deadline = now_seconds() + 120.0;
  int status = 1;
  while (now_seconds() < deadline) {
    if (access(stop, F_OK) == 0) {
      status = 0;
      break;
    }
    pmix_rank_t now[MAX_MEMBERS];
    size_t nnow = 0;
    int generation = 0;
    pthread_mutex_lock(&g_lock);
    generation = g_generation;
    nnow = g_nmembers;
    memcpy(now, g_members, nnow * sizeof now[0]);
    pthread_mutex_unlock(&g_lock);
    if (generation != seen) {
      seen = generation;
      int member = 0;
      for (size_t i = 0; i < nnow; ++i) member = member || now[i] == me.rank;
      if (!member) {
        fprintf(log, "left\n");
        status = 0;
        break;
      }
      if (nnow != nmembers || memcmp(now, members, nnow * sizeof now[0]) != 0) {
        nmembers = nnow;
        memcpy(members, now, nnow * sizeof now[0]);
        take_part(log, &me, local_rank, node_rank, members, nmembers);
      }
    }
    usleep(20000);
  }
  if (status != 0) fprintf(log, "no stop within 120 s\n");
  fclose(log);
  rc = PMIx_Finalize(NULL, 0);
  return rc == PMIX_SUCCESS ? status : 1;
}

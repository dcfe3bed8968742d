/* A PMIx-native program, written as such programs are (no Bellows library): PMIx_Init as a
 * client of its node's daemon, then what it is told of its job (PMIx_Get of the job size, the
 * node count, its local and node rank, its host name; the node list and each node's ranks
 * resolved from the job map), an event handler for every event, PMIx_Put/Commit and a
 * PMIx_Fence with collected data among the ranks of its node, then PMIx_Get of each local
 * peer's key.
 *
 *   pmix_native_client OUT_DIR [HOLD_SECONDS]
 *
 * Writes what it found as one JSON object to OUT_DIR/rank-R.json (R: its rank) and stdout. The
 * job's rank 0 then waits until every rank 0..JOB_SIZE-1 wrote its file (at most 60 s), so
 * that the job ends after all of them (not with PMIX_NATIVE_CLIENT_ALONE set). With HOLD_SECONDS, every rank then stays for that long,
 * re-reading PMIX_JOB_SIZE, PMIX_NUM_NODES and PMIX_NODE_LIST (PMIX_GET_REFRESH_CACHE) each
 * 100 ms, and writes OUT_DIR/rank-R.sizes: a line each time the size, the node count, the node
 * list or the count of events received changed (with the last PMIX_PROCESS_SET_DEFINE's name
 * and member count: how the daemon announces the job's ranks after a resize): "size S events E
 * last_event C [pset NAME members M] num_nodes N nodes NODE,NODE". Exit status: 0 when
 * every PMIx call succeeded, 1 otherwise (the file says which call failed), 2 for bad usage. */
#include <pmix.h>

#include "pmix_job_info.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_failure[1024];
static volatile int g_events = 0;
static volatile int g_last_event = 0;
/* The last PMIX_PROCESS_SET_DEFINE's name and member count. */
static char g_pset_name[256];
static volatile size_t g_pset_members = 0;

static void failed(const char* format, ...) {
  if (g_failure[0] != '\0') return; /* the first failure is the one that counts */
  va_list args;
  va_start(args, format);
  vsnprintf(g_failure, sizeof g_failure, format, args);
  va_end(args);
}

static void event_handler(size_t id, pmix_status_t status, const pmix_proc_t* source, pmix_info_t info[],
                          size_t ninfo, pmix_info_t results[], size_t nresults,
                          pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  (void)id; (void)source; (void)results; (void)nresults;
  if (status == PMIX_PROCESS_SET_DEFINE) {
    for (size_t i = 0; i < ninfo; ++i) {
      if (PMIX_CHECK_KEY(&info[i], PMIX_PSET_NAME) && info[i].value.type == PMIX_STRING)
        snprintf(g_pset_name, sizeof g_pset_name, "%s", info[i].value.data.string);
      else if (PMIX_CHECK_KEY(&info[i], PMIX_PSET_MEMBERS) && info[i].value.type == PMIX_DATA_ARRAY &&
               info[i].value.data.darray != NULL)
        g_pset_members = info[i].value.data.darray->size;
    }
  }
  g_last_event = status;
  ++g_events;
  if (cbfunc != NULL) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void registered(pmix_status_t status, size_t ref, void* cbdata) {
  (void)ref;
  *(volatile pmix_status_t*)cbdata = status;
}

/* PMIx_Get of key for proc as a number; -1 (and the failure noted) when it cannot. */
static long get_number(const pmix_proc_t* proc, const char* key, int refresh) {
  long number = -1;
  pmix_data_type_t type = PMIX_UNDEF;
  const pmix_status_t rc = job_info_number(proc, key, refresh, &number, &type);
  if (rc == PMIX_ERR_TYPE_MISMATCH)
    failed("PMIx_Get(%s): type %d", key, (int)type);
  else if (rc != PMIX_SUCCESS)
    failed("PMIx_Get(%s) for rank %u: %s", key, proc->rank, PMIx_Error_string(rc));
  return number;
}

/* PMIx_Get of the string key for proc into out; empty (and the failure noted) when it cannot. */
static void get_string(const pmix_proc_t* proc, const char* key, char* out, size_t size) {
  pmix_data_type_t type = PMIX_UNDEF;
  const pmix_status_t rc = job_info_string(proc, key, out, size, &type);
  if (rc == PMIX_ERR_TYPE_MISMATCH)
    failed("PMIx_Get(%s): type %d", key, (int)type);
  else if (rc != PMIX_SUCCESS)
    failed("PMIx_Get(%s) for rank %u: %s", key, proc->rank, PMIx_Error_string(rc));
}

/* A JSON array of strings from a comma-separated list. */
static void json_list(FILE* out, const char* list) {
  fputc('[', out);
  int first = 1;
  const char* at = list;
  while (at != NULL && *at != '\0') {
    const char* comma = strchr(at, ',');
    size_t length = comma != NULL ? (size_t)(comma - at) : strlen(at);
    fprintf(out, "%s\"%.*s\"", first ? "" : ",", (int)length, at);
    first = 0;
    at = comma != NULL ? comma + 1 : NULL;
  }
  fputc(']', out);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The job map as PMIx_Resolve_nodes and PMIx_Resolve_peers give it: *nodes (to be freed) and,
 * in out, each node's ranks, written NAME_OPEN node NAME_CLOSE ranks RANKS_CLOSE, comma-separated. */
static void describe_map(const char* nspace, char** nodes, char* out, size_t size, const char* name_open,
                         const char* name_close, const char* ranks_close) {
  size_t used = 0;
  out[0] = '\0';
  pmix_status_t rc = PMIx_Resolve_nodes(nspace, nodes);
  if (rc != PMIX_SUCCESS) failed("PMIx_Resolve_nodes: %s", PMIx_Error_string(rc));
  if (*nodes == NULL) return;
  char* copy = strdup(*nodes);
  char* saved = NULL;
  for (char* node = strtok_r(copy, ",", &saved); node != NULL; node = strtok_r(NULL, ",", &saved)) {
    pmix_proc_t* procs = NULL;
    size_t nprocs = 0;
    rc = PMIx_Resolve_peers(node, nspace, &procs, &nprocs);
    if (rc != PMIX_SUCCESS) failed("PMIx_Resolve_peers(%s): %s", node, PMIx_Error_string(rc));
    if (used < size)
      used += (size_t)snprintf(out + used, size - used, "%s%s%s%s", used == 0 ? "" : ",", name_open, node,
                               name_close);
    for (size_t i = 0; i < nprocs && used < size; ++i)
      used += (size_t)snprintf(out + used, size - used, "%s%u", i ? "," : "", procs[i].rank);
    if (used < size) used += (size_t)snprintf(out + used, size - used, "%s", ranks_close);
    if (procs != NULL) PMIX_PROC_FREE(procs, nprocs);
  }
  free(copy);
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: pmix_native_client OUT_DIR [HOLD_SECONDS]\n");
    return 2;
  }
  const char* out_dir = argv[1];
  const double hold = argc == 3 ? atof(argv[2]) : 0.0;

  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_native_client: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  volatile pmix_status_t handler_status = PMIX_ERR_TIMEOUT;
  PMIx_Register_event_handler(NULL, 0, NULL, 0, event_handler, registered, (void*)&handler_status);
  for (int i = 0; i < 500 && handler_status == PMIX_ERR_TIMEOUT; ++i) usleep(10000);
  if (handler_status != PMIX_SUCCESS)
    failed("PMIx_Register_event_handler: %s", PMIx_Error_string(handler_status));
  /* The job's ranks after a resize come as a process set (docs/daemon.md). */
  pmix_status_t pset_code = PMIX_PROCESS_SET_DEFINE;
  volatile pmix_status_t pset_status = PMIX_ERR_TIMEOUT;
  PMIx_Register_event_handler(&pset_code, 1, NULL, 0, event_handler, registered, (void*)&pset_status);
  for (int i = 0; i < 500 && pset_status == PMIX_ERR_TIMEOUT; ++i) usleep(10000);
  if (pset_status != PMIX_SUCCESS)
    failed("PMIx_Register_event_handler(PMIX_PROCESS_SET_DEFINE): %s", PMIx_Error_string(pset_status));

  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  const long job_size = get_number(&job, PMIX_JOB_SIZE, 0);
  const long univ_size = get_number(&job, PMIX_UNIV_SIZE, 0);
  const long num_nodes = get_number(&job, PMIX_NUM_NODES, 0);
  const long local_size = get_number(&job, PMIX_LOCAL_SIZE, 0);
  char local_peers[4096];
  get_string(&job, PMIX_LOCAL_PEERS, local_peers, sizeof local_peers);
  const long local_rank = get_number(&me, PMIX_LOCAL_RANK, 0);
  const long node_rank = get_number(&me, PMIX_NODE_RANK, 0);
  char hostname[256];
  get_string(&me, PMIX_HOSTNAME, hostname, sizeof hostname);

  /* The job map: its nodes, and each node's ranks. */
  char* nodes = NULL;
  char peers_by_node[8192] = "";
  describe_map(me.nspace, &nodes, peers_by_node, sizeof peers_by_node, "\"", "\":[", "]");

  /* A fence with collected data among the ranks of this node, then each one's key. */
  pmix_proc_t local[256];
  size_t nlocal = 0;
  char peers_copy[4096];
  snprintf(peers_copy, sizeof peers_copy, "%s", local_peers);
  for (char* rank = strtok(peers_copy, ","); rank != NULL && nlocal < 256; rank = strtok(NULL, ",")) {
    PMIX_LOAD_PROCID(&local[nlocal], me.nspace, (pmix_rank_t)strtoul(rank, NULL, 10));
    ++nlocal; /* not inside the macro's argument: it is evaluated more than once */
  }
  pmix_value_t mine;
  PMIX_VALUE_LOAD(&mine, &me.rank, PMIX_UINT32);
  rc = PMIx_Put(PMIX_LOCAL, "bellows.test.rank", &mine);
  PMIX_VALUE_DESTRUCT(&mine);
  if (rc != PMIX_SUCCESS) failed("PMIx_Put: %s", PMIx_Error_string(rc));
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) failed("PMIx_Commit: %s", PMIx_Error_string(rc));
  pmix_info_t collect;
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
  const double fence_start = now_seconds();
  rc = PMIx_Fence(local, nlocal, &collect, 1);
  const double fence_seconds = now_seconds() - fence_start;
  PMIX_INFO_DESTRUCT(&collect);
  int fence_ok = rc == PMIX_SUCCESS;
  if (!fence_ok) failed("PMIx_Fence among %zu local rank(s): %s", nlocal, PMIx_Error_string(rc));
  int peer_keys = 0;
  for (size_t i = 0; fence_ok && i < nlocal; ++i) {
    if (get_number(&local[i], "bellows.test.rank", 0) == (long)local[i].rank) ++peer_keys;
  }

  char path[4096];
  snprintf(path, sizeof path, "%s/rank-%u.json.partial", out_dir, me.rank);
  FILE* out = fopen(path, "w");
  if (out == NULL) {
    fprintf(stderr, "pmix_native_client: cannot write %s\n", path);
    PMIx_Finalize(NULL, 0);
    return 1;
  }
  const char* bellows_node = getenv("BELLOWS_NODE");
  fprintf(out,
          "{\"nspace\":\"%s\",\"rank\":%u,\"job_size\":%ld,\"univ_size\":%ld,\"num_nodes\":%ld,"
          "\"local_size\":%ld,\"local_peers\":",
          me.nspace, me.rank, job_size, univ_size, num_nodes, local_size);
  json_list(out, local_peers);
  fprintf(out, ",\"local_rank\":%ld,\"node_rank\":%ld,\"hostname\":\"%s\",\"bellows_node\":\"%s\",\"nodes\":",
          local_rank, node_rank, hostname, bellows_node != NULL ? bellows_node : "");
  json_list(out, nodes != NULL ? nodes : "");
  fprintf(out, ",\"peers_by_node\":{%s},\"fence\":%s,\"fence_seconds\":%.6f,\"local_keys\":%d,"
               "\"event_handler\":%s,\"failure\":\"%s\"}\n",
          peers_by_node, fence_ok ? "true" : "false", fence_seconds, peer_keys,
          handler_status == PMIX_SUCCESS ? "true" : "false", g_failure);
  fclose(out);
  char final_path[4096];
  snprintf(final_path, sizeof final_path, "%s/rank-%u.json", out_dir, me.rank);
  rename(path, final_path);
  printf("pmix_native_client: rank %u of %s: job size %ld on %ld node(s)%s%s\n", me.rank, me.nspace, job_size,
         num_nodes, g_failure[0] ? ": " : "", g_failure);
  fflush(stdout);
  free(nodes);

  if (hold > 0.0) {
    snprintf(path, sizeof path, "%s/rank-%u.sizes", out_dir, me.rank);
    FILE* sizes = fopen(path, "w");
    long last = job_size;
    long last_nodes = num_nodes;
    char last_map[8192];
    job_info_refreshed_nodes(me.nspace, last_map, sizeof last_map);  /* as at the start: no line for it */
    int last_events = 0;
    const double end = now_seconds() + hold;
    while (sizes != NULL && now_seconds() < end) {
      /* The job's info again from the daemon (it registers the job again at each resize). */
      const long size = get_number(&job, PMIX_JOB_SIZE, 1);
      const long nodes_now = get_number(&job, PMIX_NUM_NODES, 1);
      char map[8192];
      job_info_refreshed_nodes(me.nspace, map, sizeof map);
      if (size != last || nodes_now != last_nodes || strcmp(map, last_map) != 0 || g_events != last_events) {
        fprintf(sizes, "size %ld events %d last_event %d", size, g_events, g_last_event);
        if (g_pset_name[0] != '\0') fprintf(sizes, " pset %s members %zu", g_pset_name, (size_t)g_pset_members);
        fprintf(sizes, " num_nodes %ld nodes %s\n", nodes_now, map);
        fflush(sizes);
        last = size;
        last_nodes = nodes_now;
        snprintf(last_map, sizeof last_map, "%s", map);
        last_events = g_events;
      }
      usleep(100000);
    }
    if (sizes != NULL) fclose(sizes);
  }

  if (me.rank == 0 && job_size > 0 && getenv("PMIX_NATIVE_CLIENT_ALONE") == NULL) {
    /* The job ends with its first rank: wait for the others' files. */
    const double deadline = now_seconds() + 60.0;
    for (long r = 0; r < 4096 && now_seconds() < deadline;) {
      struct stat st;
      snprintf(path, sizeof path, "%s/rank-%ld.json", out_dir, r);
      /* Ranks are numbered 0..job_size-1 at a job's start. */
      if (r >= job_size) break;
      if (stat(path, &st) == 0) {
        ++r;
      } else {
        usleep(20000);
      }
    }
  }
  rc = PMIx_Finalize(NULL, 0);
  if (rc != PMIX_SUCCESS) failed("PMIx_Finalize: %s", PMIx_Error_string(rc));
  return g_failure[0] != '\0' ? 1 : 0;
}

/* bellows-pmix-query: a PMIx tool, written as a debugger or a monitoring agent is, that attaches
 * to a node's bellowsd by its server URI and asks it about the job with PMIx_Query_info.
 *
 *   bellows-pmix-query --uri URI|file:PATH [--nspace NS] [--repeat N | --events SECONDS]
 *
 * Without --repeat it asks, one PMIx_Query_info each, for the keys the daemon documents
 * (docs/daemon.md, "PMIx queries") and one it does not answer, and prints one JSON object:
 *   {"tool": "NSPACE:RANK", "queries": [{"name": ..., "keys": [...], "status": CODE,
 *    "status_name": "...", "results": {KEY: VALUE, ...}}, ...]}
 * A process table is a list of {"nspace", "rank", "host", "pid", "state"}; an array of infos an
 * object (a repeated key becomes a list). Every query carries PMIX_QUERY_REFRESH_CACHE, so the
 * answers are the daemon's now and not the tool's cache. Job-scoped queries name --nspace,
 * or else the first namespace the daemon answers.
 *
 * With --repeat N it times N round trips of each of a few queries and prints a line each
 * (median and 99th percentile in microseconds).
 *
 * With --events SECONDS it asks no query: it registers one handler for the standard events the
 * daemon raises (PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_EVENT_NODE_DOWN,
 * PMIX_EVENT_JOB_END), prints {"registered": true} once it is in place, then one JSON line per
 * event as it comes:
 *   {"event": "PMIX_EVENT_NODE_DOWN", "code": -231, "source": "NSPACE:RANK",
 *    "affected": [{"nspace": ..., "rank": R}], "hostname": ..., "exit_code": N, "text": ...}
 * ("affected" from PMIX_EVENT_AFFECTED_PROC(S), rank "wildcard" for the whole namespace;
 * hostname, exit_code and text only when the event carries them), and exits after
 * PMIX_EVENT_JOB_END, or when SECONDS passed without it.
 *
 * Exit status: 0 when every query came back (whatever its status) or the job's end came, 1
 * when the tool could not attach, a query failed to go out or the handler could not be
 * registered, or when the attach, a query or the detach got no answer within 10 s (PMIx 4.2.2
 * leaves a call waiting for ever when the server goes away under it: the tool then says which
 * call and exits), 2 for bad options, 3 when SECONDS of --events passed without the job's end.
 * Uses only the PMIx tool API. */
#define _POSIX_C_SOURCE 200809L

#include <pmix_tool.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmix_tool_text.h"

/* How long one call to the server may wait for its answer. */
#define ANSWER_SECONDS 10

/* The call now waiting for the server (a string literal), for the message of no_answer. */
static const char* volatile g_waiting_for = "";

static void write_text(const char* text) {
  ssize_t left = (ssize_t)strlen(text);
  while (left > 0) {
    const ssize_t wrote = write(STDERR_FILENO, text, (size_t)left);
    if (wrote <= 0) return;
    text += wrote;
    left -= wrote;
  }
}

/* SIGALRM: the call in g_waiting_for got no answer in time; says so and exits 1. */
static void no_answer(int sig) {
  (void)sig;
  write_text("bellows-pmix-query: ");
  write_text(g_waiting_for);
  write_text(": no answer from the PMIx server within 10 s (the daemon may have stopped)\n");
  _exit(1);
}

/* Starts (call != NULL) or ends (NULL) the wait of one call for the server's answer. */
static void awaiting(const char* call) {
  if (call == NULL) {
    alarm(0);
    return;
  }
  g_waiting_for = call;
  alarm(ANSWER_SECONDS);
}

static void usage(void) {
  fprintf(stderr,
          "usage: bellows-pmix-query --uri URI|file:PATH [--nspace NS] [--repeat N | --events SECONDS]\n");
}

static void print_value(const pmix_value_t* v);

static void print_infos(const pmix_info_t* info, size_t n) {
  putchar('{');
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) printf(", ");
    print_json_string(info[i].key);
    printf(": ");
    print_value(&info[i].value);
  }
  putchar('}');
}

static void print_value(const pmix_value_t* v) {
  switch (v->type) {
    case PMIX_STRING: print_json_string(v->data.string); break;
    case PMIX_UINT32: printf("%u", v->data.uint32); break;
    case PMIX_UINT64: printf("%llu", (unsigned long long)v->data.uint64); break;
    case PMIX_SIZE: printf("%zu", v->data.size); break;
    case PMIX_INT: printf("%d", v->data.integer); break;
    case PMIX_BOOL: printf(v->data.flag ? "true" : "false"); break;
    case PMIX_PROC_RANK: printf("%u", v->data.rank); break;
    case PMIX_DATA_ARRAY: {
      const pmix_data_array_t* a = v->data.darray;
      putchar('[');
      for (size_t i = 0; a != NULL && i < a->size; ++i) {
        if (i > 0) printf(", ");
        if (a->type == PMIX_PROC_INFO) {
          const pmix_proc_info_t* p = &((const pmix_proc_info_t*)a->array)[i];
          printf("{\"nspace\": ");
          print_json_string(p->proc.nspace);
          printf(", \"rank\": %u, \"host\": ", p->proc.rank);
          print_json_string(p->hostname);
          printf(", \"pid\": %d, \"state\": ", (int)p->pid);
          print_json_string(PMIx_Proc_state_string(p->state));
          putchar('}');
        } else if (a->type == PMIX_INFO) {
          const pmix_info_t* info = &((const pmix_info_t*)a->array)[i];
          putchar('{');
          print_json_string(info->key);
          printf(": ");
          print_value(&info->value);
          putchar('}');
        } else if (a->type == PMIX_STRING) {
          print_json_string(((char**)a->array)[i]);
        } else {
          print_json_string(PMIx_Data_type_string(a->type));
        }
      }
      putchar(']');
      break;
    }
    default: print_json_string(PMIx_Data_type_string(v->type)); break;
  }
}

/* One query of `keys` (NULL-terminated), qualified by nspace when it is not NULL; results
 * and their count are the caller's to free (PMIX_INFO_FREE). */
static pmix_status_t query(const char* const* keys, const char* nspace, int refresh,
                           pmix_info_t** results, size_t* nresults) {
  pmix_query_t* q = NULL;
  PMIX_QUERY_CREATE(q, 1);
  pmix_status_t rc = PMIX_SUCCESS;
  for (size_t k = 0; keys[k] != NULL; ++k) PMIX_ARGV_APPEND(rc, q[0].keys, keys[k]);
  size_t nqual = (nspace != NULL ? 1 : 0) + (refresh ? 1 : 0);
  if (nqual > 0) {
    PMIX_QUERY_QUALIFIERS_CREATE(&q[0], nqual);
    size_t at = 0;
    if (nspace != NULL) PMIX_INFO_LOAD(&q[0].qualifiers[at++], PMIX_NSPACE, nspace, PMIX_STRING);
    if (refresh) {
      const bool yes = true;
      PMIX_INFO_LOAD(&q[0].qualifiers[at], PMIX_QUERY_REFRESH_CACHE, &yes, PMIX_BOOL);
    }
  }
  *results = NULL;
  *nresults = 0;
  awaiting("PMIx_Query_info");
  rc = PMIx_Query_info(q, 1, results, nresults);
  awaiting(NULL);
  PMIX_QUERY_FREE(q, 1);
  return rc;
}

/* Runs one query and prints it as an element of "queries"; returns its status. */
static pmix_status_t report(const char* name, const char* const* keys, const char* nspace, int first) {
  pmix_info_t* results = NULL;
  size_t n = 0;
  const pmix_status_t rc = query(keys, nspace, 1, &results, &n);
  printf("%s\n  {\"name\": ", first ? "" : ",");
  print_json_string(name);
  printf(", \"keys\": [");
  for (size_t k = 0; keys[k] != NULL; ++k) {
    if (k > 0) printf(", ");
    print_json_string(keys[k]);
  }
  printf("], \"status\": %d, \"status_name\": ", rc);
  print_json_string(PMIx_Error_string(rc));
  printf(", \"results\": ");
  print_infos(results, n);
  putchar('}');
  if (results != NULL) PMIX_INFO_FREE(results, n);
  return rc;
}

/* The first namespace the daemon answers (caller frees), or NULL. */
static char* first_namespace(void) {
  const char* keys[] = {PMIX_QUERY_NAMESPACES, NULL};
  pmix_info_t* results = NULL;
  size_t n = 0;
  char* nspace = NULL;
  if (query(keys, NULL, 1, &results, &n) == PMIX_SUCCESS && n > 0 &&
      results[0].value.type == PMIX_STRING && results[0].value.data.string != NULL) {
    nspace = strdup(results[0].value.data.string);
    nspace[strcspn(nspace, ",")] = '\0';
  }
  if (results != NULL) PMIX_INFO_FREE(results, n);
  return nspace;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Times `repeat` round trips of one query and prints "LABEL: median M us, p99 P us (N, STATUS)". */
static int time_query(const char* label, const char* const* keys, const char* nspace, int refresh,
                      int repeat) {
  double* us = calloc((size_t)repeat, sizeof *us);
  pmix_status_t last = PMIX_SUCCESS;
  for (int i = 0; i < repeat; ++i) {
    pmix_info_t* results = NULL;
    size_t n = 0;
    const double start = now_us();
    last = query(keys, nspace, refresh, &results, &n);
    us[i] = now_us() - start;
    if (results != NULL) PMIX_INFO_FREE(results, n);
  }
  qsort(us, (size_t)repeat, sizeof *us, by_value);
  size_t p99 = (size_t)(0.99 * repeat);
  if (p99 >= (size_t)repeat) p99 = (size_t)repeat - 1;
  printf("%-46s median %8.1f us, p99 %8.1f us (%d queries, %s)\n", label, us[repeat / 2], us[p99],
         repeat, PMIx_Error_string(last));
  free(us);
  return 0;
}

/* The standard events --events listens for, by name. */
static const struct {
  pmix_status_t code;
  const char* name;
} standard_events[] = {
    {PMIX_EVENT_PROC_TERMINATED, "PMIX_EVENT_PROC_TERMINATED"},
    {PMIX_ERR_PROC_ABORTED_BY_SIG, "PMIX_ERR_PROC_ABORTED_BY_SIG"},
    {PMIX_EVENT_NODE_DOWN, "PMIX_EVENT_NODE_DOWN"},
    {PMIX_EVENT_JOB_END, "PMIX_EVENT_JOB_END"},
};

/* Set by the handler (PMIx's progress thread) when the job's end came; main waits on it. */
static pthread_mutex_t job_end_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_end_changed = PTHREAD_COND_INITIALIZER;
static int job_end_seen = 0;

static void print_proc(const pmix_proc_t* proc) {
  printf("{\"nspace\": ");
  print_json_string(proc->nspace);
  if (proc->rank == PMIX_RANK_WILDCARD)
    printf(", \"rank\": \"wildcard\"}");
  else
    printf(", \"rank\": %u}", proc->rank);
}

/* Prints one event as a JSON line (see the top of this file). */
static void on_event(size_t handler, pmix_status_t code, const pmix_proc_t* source, pmix_info_t info[],
                     size_t ninfo, pmix_info_t* results, size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  (void)handler;
  (void)results;
  (void)nresults;
  const char* name = PMIx_Error_string(code);
  for (size_t e = 0; e < sizeof standard_events / sizeof standard_events[0]; ++e)
    if (standard_events[e].code == code) name = standard_events[e].name;
  printf("{\"event\": ");
  print_json_string(name);
  printf(", \"code\": %d, \"source\": \"%s:%u\", \"affected\": [", code,
         source != NULL ? source->nspace : "", source != NULL ? source->rank : 0);
  int first = 1;
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC) {
      print_proc(info[i].value.data.proc);
      first = 0;
    } else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROCS) && info[i].value.type == PMIX_DATA_ARRAY &&
               info[i].value.data.darray != NULL && info[i].value.data.darray->type == PMIX_PROC) {
      const pmix_data_array_t* procs = info[i].value.data.darray;
      for (size_t p = 0; p < procs->size; ++p) {
        if (!first) printf(", ");
        print_proc(&((const pmix_proc_t*)procs->array)[p]);
        first = 0;
      }
    }
  }
  putchar(']');
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_HOSTNAME) && info[i].value.type == PMIX_STRING) {
      printf(", \"hostname\": ");
      print_json_string(info[i].value.data.string);
    } else if (PMIX_CHECK_KEY(&info[i], PMIX_EXIT_CODE) && info[i].value.type == PMIX_INT) {
      printf(", \"exit_code\": %d", info[i].value.data.integer);
    } else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_TEXT_MESSAGE) && info[i].value.type == PMIX_STRING) {
      printf(", \"text\": ");
      print_json_string(info[i].value.data.string);
    }
  }
  printf("}\n");
  fflush(stdout);
  if (code == PMIX_EVENT_JOB_END) {
    pthread_mutex_lock(&job_end_mutex);
    job_end_seen = 1;
    pthread_cond_signal(&job_end_changed);
    pthread_mutex_unlock(&job_end_mutex);
  }
  if (cbfunc != NULL) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

/* --events: registers the handler and waits for the job's end, at most `seconds`. Returns the
 * exit status (0, 1 or 3). */
static int listen_for_events(int seconds) {
  pmix_status_t codes[sizeof standard_events / sizeof standard_events[0]];
  for (size_t e = 0; e < sizeof codes / sizeof codes[0]; ++e) codes[e] = standard_events[e].code;
  const pmix_status_t rc = PMIx_Register_event_handler(codes, sizeof codes / sizeof codes[0], NULL, 0,
                                                       on_event, NULL, NULL);
  if (rc < 0) {
    fprintf(stderr, "bellows-pmix-query: PMIx_Register_event_handler: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  printf("{\"registered\": true}\n");
  fflush(stdout);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  pthread_mutex_lock(&job_end_mutex);
  int timed_out = 0;
  while (!job_end_seen && !timed_out)
    timed_out = pthread_cond_timedwait(&job_end_changed, &job_end_mutex, &deadline) != 0;
  const int seen = job_end_seen;
  pthread_mutex_unlock(&job_end_mutex);
  PMIx_Deregister_event_handler((size_t)rc, NULL, NULL);
  if (!seen) fprintf(stderr, "bellows-pmix-query: no PMIX_EVENT_JOB_END within %d s\n", seconds);
  return seen ? 0 : 3;
}

int main(int argc, char** argv) {
  const char* uri_arg = NULL;
  const char* nspace_arg = NULL;
  int repeat = 0;
  int events_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--uri") == 0 && i + 1 < argc) {
      uri_arg = argv[++i];
    } else if (strcmp(argv[i], "--nspace") == 0 && i + 1 < argc) {
      nspace_arg = argv[++i];
    } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      char* end = NULL;
      const long value = strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 1000000) {
        fprintf(stderr, "bellows-pmix-query: --repeat %s is not a count from 1 to 1000000\n", argv[i]);
        return 2;
      }
      repeat = (int)value;
    } else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
      char* end = NULL;
      const long value = strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 86400) {
        fprintf(stderr, "bellows-pmix-query: --events %s is not a number of seconds from 1 to 86400\n", argv[i]);
        return 2;
      }
      events_seconds = (int)value;
    } else {
      fprintf(stderr, "bellows-pmix-query: unknown option %s\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (uri_arg == NULL || (repeat > 0 && events_seconds > 0)) {
    usage();
    return 2;
  }
  char* uri = read_server_uri("bellows-pmix-query", uri_arg);
  if (uri == NULL) return 1;

  pmix_proc_t me;
  pmix_info_t* info = NULL;
  PMIX_INFO_CREATE(info, 1);
  PMIX_INFO_LOAD(&info[0], PMIX_SERVER_URI, uri, PMIX_STRING);
  struct sigaction on_alarm;
  memset(&on_alarm, 0, sizeof on_alarm);
  on_alarm.sa_handler = no_answer;
  sigaction(SIGALRM, &on_alarm, NULL);
  const double attach_start = now_us();
  awaiting("PMIx_tool_init");
  pmix_status_t rc = PMIx_tool_init(&me, info, 1);
  awaiting(NULL);
  const double attach_us = now_us() - attach_start;
  PMIX_INFO_FREE(info, 1);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "bellows-pmix-query: cannot attach to the PMIx server at %s: %s\n", uri,
            PMIx_Error_string(rc));
    free(uri);
    return 1;
  }

  if (events_seconds > 0) {
    const int status = listen_for_events(events_seconds);
    free(uri);
    /* The daemon stops right after the job's end: a finalize that cannot reach it is no error. */
    awaiting("PMIx_tool_finalize");
    rc = PMIx_tool_finalize();
    awaiting(NULL);
    if (rc != PMIX_SUCCESS)
      fprintf(stderr, "bellows-pmix-query: PMIx_tool_finalize: %s (the daemon may have stopped)\n",
              PMIx_Error_string(rc));
    return status;
  }

  char* nspace = nspace_arg != NULL ? strdup(nspace_arg) : first_namespace();
  const char* job = nspace != NULL ? nspace : "";
  int status = 0;
  if (repeat > 0) {
    const char* job_size[] = {PMIX_JOB_SIZE, NULL};
    const char* table[] = {PMIX_QUERY_PROC_TABLE, NULL};
    const char* several[] = {PMIX_QUERY_NAMESPACES, PMIX_JOB_SIZE, PMIX_QUERY_PROC_TABLE,
                             PMIX_QUERY_ALLOC_STATUS, NULL};
    const char* unknown[] = {PMIX_QUERY_MEMORY_USAGE, NULL};
    printf("PMIx_tool_init (attach):                       %8.1f us\n", attach_us);
    time_query("PMIx_Query_info JOB_SIZE, refresh:", job_size, job, 1, repeat);
    time_query("PMIx_Query_info PROC_TABLE, refresh:", table, job, 1, repeat);
    time_query("PMIx_Query_info 4 keys, refresh:", several, job, 1, repeat);
    time_query("PMIx_Query_info JOB_SIZE, no refresh:", job_size, job, 0, repeat);
    const char* namespaces[] = {PMIX_QUERY_NAMESPACES, NULL};
    time_query("PMIx_Query_info NAMESPACES, no refresh:", namespaces, NULL, 0, repeat);
    time_query("PMIx_Query_info unknown key:", unknown, NULL, 1, repeat);
  } else {
    const char* supported[] = {PMIX_QUERY_SUPPORTED_KEYS, NULL};
    const char* namespaces[] = {PMIX_QUERY_NAMESPACES, NULL};
    const char* job_size[] = {PMIX_JOB_SIZE, NULL};
    const char* table[] = {PMIX_QUERY_PROC_TABLE, NULL};
    const char* local_table[] = {PMIX_QUERY_LOCAL_PROC_TABLE, NULL};
    const char* ns_info[] = {PMIX_QUERY_NAMESPACE_INFO, NULL};
    const char* alloc[] = {PMIX_QUERY_ALLOC_STATUS, NULL};
    const char* psets[] = {PMIX_QUERY_NUM_PSETS, NULL};
    const char* pset_names[] = {PMIX_QUERY_PSET_NAMES, NULL};
    const char* psets_both[] = {PMIX_QUERY_NUM_PSETS, PMIX_QUERY_PSET_NAMES, NULL};
    const char* bellows_keys[] = {"bellows.query.resize", "bellows.query.node_range",
                                  "bellows.query.policy", NULL};
    const char* unknown[] = {PMIX_QUERY_MEMORY_USAGE, NULL};
    const char* other_job[] = {PMIX_JOB_SIZE, NULL};
    /* Qualified by another namespace: the namespaces are answered, that job's size is not. */
    const char* half_answered[] = {PMIX_QUERY_NAMESPACES, PMIX_JOB_SIZE, NULL};
    printf("{\"tool\": \"%s:%u\", \"nspace\": ", me.nspace, me.rank);
    print_json_string(job);
    printf(", \"queries\": [");
    report("supported_keys", supported, NULL, 1);
    report("namespaces", namespaces, NULL, 0);
    report("job_size", job_size, job, 0);
    report("proc_table", table, job, 0);
    report("proc_table_again", table, job, 0);
    report("local_proc_table", local_table, job, 0);
    report("namespace_info", ns_info, NULL, 0);
    report("alloc_status", alloc, NULL, 0);
    report("num_psets", psets, NULL, 0);
    report("pset_names", pset_names, NULL, 0);
    report("psets", psets_both, NULL, 0);
    report("bellows", bellows_keys, NULL, 0);
    report("unknown_key", unknown, NULL, 0);
    report("other_namespace", other_job, "no-such-job", 0);
    report("half_answered", half_answered, "no-such-job", 0);
    printf("\n]}\n");
  }
  free(nspace);
  free(uri);
  awaiting("PMIx_tool_finalize");
  rc = PMIx_tool_finalize();
  awaiting(NULL);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "bellows-pmix-query: PMIx_tool_finalize: %s\n", PMIx_Error_string(rc));
    status = 1;
  }
  return status;
}

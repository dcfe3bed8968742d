/* bellows-pmix-control: a PMIx tool, written as a workflow system or a resource-aware runtime
 * is, that attaches to a node's bellowsd by its server URI and asks it to change the job: more
 * or fewer nodes (PMIx_Allocation_request), a request called off, a signal to a rank or the
 * end of a rank or the job (PMIx_Job_control_nb).
 *
 *   bellows-pmix-control --uri URI|file:PATH [--wait SECONDS] COMMAND
 *     extend N [--req-id ID] [--cancel]  PMIX_ALLOC_EXTEND of N nodes; with --cancel, the
 *                                        request is cancelled (directive 5, PMIX_ALLOC_REQ_CANCEL
 *                                        in PMIx 5) as soon as it was taken
 *     release N [--req-id ID]            PMIX_ALLOC_RELEASE of N nodes
 *     signal NSPACE RANK|all SIGNAL      PMIX_JOB_CTRL_SIGNAL to a rank or every rank
 *     terminate NSPACE RANK|all          PMIX_JOB_CTRL_TERMINATE of a rank or the job
 *     directive NSPACE RANK|all KEY      a boolean job control directive KEY (pmix.jctrl.*)
 *
 * It prints one JSON line per call as it returns, and for an allocation request taken one for
 * the PMIX_NOTIFY_ALLOC_COMPLETE event that ends it:
 *   {"call": "extend", "status": 0, "status_name": "SUCCESS", "request_id": "...",
 *    "text": "...", "time": UNIX_SECONDS}
 *   {"event": "PMIX_NOTIFY_ALLOC_COMPLETE", "code": -105, "request_id": "...", "alloc_id": "...",
 *    "outcome": "committed", "text": "...", "time": UNIX_SECONDS}
 *   {"call": "signal", "status": -27, "status_name": "BAD-PARAM", "time": UNIX_SECONDS}
 * (request_id and text only when the reply carries them: PMIx 4.2.2 returns a reply's
 * attributes only with PMIX_SUCCESS.)
 *
 * Exit status: 0 when every call returned, whatever its status, and a taken allocation request
 * ended within --wait SECONDS (default 120); 1 when the tool could not attach or register its
 * handler; 2 for bad options; 3 when the end of a taken request did not come in time.
 * Uses only the PMIx tool API. */
#define _POSIX_C_SOURCE 200809L

#include <pmix_tool.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_tool_text.h"

/* PMIx 5 names it PMIX_ALLOC_REQ_CANCEL; PMIx 4.2.2 passes the value on without a name. */
#ifndef PMIX_ALLOC_REQ_CANCEL
#define PMIX_ALLOC_REQ_CANCEL 5
#endif

static void usage(void) {
  fprintf(stderr,
          "usage: bellows-pmix-control --uri URI|file:PATH [--wait SECONDS] COMMAND\n"
          "  extend N [--req-id ID] [--cancel] | release N [--req-id ID]\n"
          "  signal NSPACE RANK|all SIGNAL | terminate NSPACE RANK|all | directive NSPACE RANK|all KEY\n");
}

static double unix_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A string attribute of an info array, or NULL. */
static const char* string_of(const pmix_info_t* info, size_t ninfo, const char* key) {
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], key) && info[i].value.type == PMIX_STRING) return info[i].value.data.string;
  }
  return NULL;
}

/* ---------------------------------------------------------------- PMIX_NOTIFY_ALLOC_COMPLETE */

static pthread_mutex_t done_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_changed = PTHREAD_COND_INITIALIZER;
static int completions_seen = 0;

static void on_alloc_complete(size_t id, pmix_status_t code, const pmix_proc_t* source, pmix_info_t info[],
                              size_t ninfo, pmix_info_t* results, size_t nresults,
                              pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  (void)id;
  (void)source;
  (void)results;
  (void)nresults;
  const char* keys[][2] = {{"request_id", PMIX_ALLOC_REQ_ID},
                           {"alloc_id", PMIX_ALLOC_ID},
                           {"outcome", "bellows.alloc.outcome"},
                           {"text", PMIX_EVENT_TEXT_MESSAGE}};
  pthread_mutex_lock(&done_mutex);
  printf("{\"event\": \"PMIX_NOTIFY_ALLOC_COMPLETE\", \"code\": %d", code);
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k) {
    const char* value = string_of(info, ninfo, keys[k][1]);
    if (value == NULL) continue;
    printf(", \"%s\": ", keys[k][0]);
    print_json_string(value);
  }
  printf(", \"time\": %.6f}\n", unix_seconds());
  fflush(stdout);
  ++completions_seen;
  pthread_cond_signal(&done_changed);
  pthread_mutex_unlock(&done_mutex);
  if (cbfunc != NULL) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

/* Waits until `count` completions came, at most `seconds`; true when they did. */
static bool wait_for_completions(int count, int seconds) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  pthread_mutex_lock(&done_mutex);
  int timed_out = 0;
  while (completions_seen < count && !timed_out)
    timed_out = pthread_cond_timedwait(&done_changed, &done_mutex, &deadline) != 0;
  const bool seen = completions_seen >= count;
  pthread_mutex_unlock(&done_mutex);
  return seen;
}

/* ---------------------------------------------------------------- the calls */

/* Prints the line of a returned call; the reply's request id is copied to `request_id`. */
static void print_call(const char* call, pmix_status_t status, const pmix_info_t* results, size_t nresults,
                       char* request_id, size_t request_id_size) {
  pthread_mutex_lock(&done_mutex);
  printf("{\"call\": \"%s\", \"status\": %d, \"status_name\": ", call, status);
  print_json_string(PMIx_Error_string(status));
  const char* id = string_of(results, nresults, PMIX_ALLOC_REQ_ID);
  if (id != NULL) {
    printf(", \"request_id\": ");
    print_json_string(id);
    if (request_id != NULL) snprintf(request_id, request_id_size, "%s", id);
  }
  const char* text = string_of(results, nresults, "bellows.reply.text");
  if (text != NULL) {
    printf(", \"text\": ");
    print_json_string(text);
  }
  printf(", \"time\": %.6f}\n", unix_seconds());
  fflush(stdout);
  pthread_mutex_unlock(&done_mutex);
}

/* PMIx_Allocation_request with a node count (or none, for a cancel) and a request id (or none).
 * Returns its status; the id the reply carries is copied to request_id. */
static pmix_status_t allocate(const char* call, pmix_alloc_directive_t directive, uint64_t nodes,
                              const char* given_id, char* request_id, size_t request_id_size) {
  pmix_info_t info[2];
  size_t ninfo = 0;
  if (directive != PMIX_ALLOC_REQ_CANCEL) {
    PMIX_INFO_LOAD(&info[ninfo], PMIX_ALLOC_NUM_NODES, &nodes, PMIX_UINT64);
    ++ninfo;
  }
  if (given_id != NULL) {
    PMIX_INFO_LOAD(&info[ninfo], PMIX_ALLOC_REQ_ID, given_id, PMIX_STRING);
    ++ninfo;
  }
  pmix_info_t* results = NULL;
  size_t nresults = 0;
  const pmix_status_t status = PMIx_Allocation_request(directive, info, ninfo, &results, &nresults);
  print_call(call, status, results, nresults, request_id, request_id_size);
  if (results != NULL) PMIX_INFO_FREE(results, nresults);
  for (size_t i = 0; i < ninfo; ++i) PMIX_INFO_DESTRUCT(&info[i]);
  return status;
}

struct JobControlAnswer {
  pthread_mutex_t mutex;
  pthread_cond_t changed;
  bool done;
  pmix_status_t status;
};

static void job_control_answered(pmix_status_t status, pmix_info_t* info, size_t ninfo, void* cbdata,
                                 pmix_release_cbfunc_t release_fn, void* release_cbdata) {
  (void)info;
  (void)ninfo;
  struct JobControlAnswer* answer = cbdata;
  pthread_mutex_lock(&answer->mutex);
  answer->status = status;
  answer->done = true;
  pthread_cond_signal(&answer->changed);
  pthread_mutex_unlock(&answer->mutex);
  if (release_fn != NULL) release_fn(release_cbdata);
}

/* PMIx_Job_control_nb on one target with one directive; waits for its answer. */
static pmix_status_t job_control(const char* call, const char* nspace, const char* rank, const char* key,
                                 const void* value, pmix_data_type_t type, int seconds) {
  pmix_proc_t target;
  PMIX_PROC_LOAD(&target, nspace, strcmp(rank, "all") == 0 ? PMIX_RANK_WILDCARD : (pmix_rank_t)strtoul(rank, NULL, 10));
  pmix_info_t directive;
  PMIX_INFO_LOAD(&directive, key, value, type);
  struct JobControlAnswer answer = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, PMIX_SUCCESS};
  pmix_status_t status = PMIx_Job_control_nb(&target, 1, &directive, 1, job_control_answered, &answer);
  if (status == PMIX_SUCCESS) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&answer.mutex);
    int timed_out = 0;
    while (!answer.done && !timed_out) timed_out = pthread_cond_timedwait(&answer.changed, &answer.mutex, &deadline) != 0;
    status = answer.done ? answer.status : PMIX_ERR_TIMEOUT;
    pthread_mutex_unlock(&answer.mutex);
  }
  print_call(call, status, NULL, 0, NULL, 0);
  PMIX_INFO_DESTRUCT(&directive);
  return status;
}

/* A rank "N" or "all"; false with a message for anything else. */
static bool valid_rank(const char* rank) {
  if (strcmp(rank, "all") == 0) return true;
  char* end = NULL;
  const unsigned long value = strtoul(rank, &end, 10);
  if (*rank == '\0' || *end != '\0' || value >= PMIX_RANK_VALID) {
    fprintf(stderr, "bellows-pmix-control: rank %s is neither a rank number nor all\n", rank);
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  const char* uri_arg = NULL;
  int wait_seconds = 120;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    if (strcmp(argv[i], "--uri") == 0 && i + 1 < argc) {
      uri_arg = argv[++i];
    } else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc) {
      char* end = NULL;
      const long value = strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 86400) {
        fprintf(stderr, "bellows-pmix-control: --wait %s is not a number of seconds from 1 to 86400\n", argv[i]);
        return 2;
      }
      wait_seconds = (int)value;
    } else {
      fprintf(stderr, "bellows-pmix-control: unknown option %s\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (uri_arg == NULL || i >= argc) {
    usage();
    return 2;
  }
  const char* command = argv[i++];
  const int left = argc - i;
  char** args = argv + i;

  /* Options checked before attaching. */
  uint64_t nodes = 0;
  const char* given_id = NULL;
  bool cancel = false;
  int signal_number = 0;
  const bool allocation = strcmp(command, "extend") == 0 || strcmp(command, "release") == 0;
  if (allocation) {
    if (left < 1) {
      usage();
      return 2;
    }
    char* end = NULL;
    nodes = strtoull(args[0], &end, 10);
    if (*end != '\0' || nodes < 1 || nodes > 100000) {
      fprintf(stderr, "bellows-pmix-control: %s %s is not a node count from 1 to 100000\n", command, args[0]);
      return 2;
    }
    for (int a = 1; a < left; ++a) {
      if (strcmp(args[a], "--req-id") == 0 && a + 1 < left) {
        given_id = args[++a];
      } else if (strcmp(args[a], "--cancel") == 0 && strcmp(command, "extend") == 0) {
        cancel = true;
      } else {
        fprintf(stderr, "bellows-pmix-control: unknown argument %s of %s\n", args[a], command);
        return 2;
      }
    }
  } else if (strcmp(command, "signal") == 0 || strcmp(command, "terminate") == 0 ||
             strcmp(command, "directive") == 0) {
    const int needed = strcmp(command, "terminate") == 0 ? 2 : 3;
    if (left != needed) {
      usage();
      return 2;
    }
    if (!valid_rank(args[1])) return 2;
    if (strcmp(command, "signal") == 0) {
      char* end = NULL;
      const long value = strtol(args[2], &end, 10);
      if (*end != '\0' || value < 1 || value > 64) {
        fprintf(stderr, "bellows-pmix-control: signal %s is not a signal number from 1 to 64\n", args[2]);
        return 2;
      }
      signal_number = (int)value;
    }
  } else {
    fprintf(stderr, "bellows-pmix-control: unknown command %s\n", command);
    usage();
    return 2;
  }

  char* uri = read_server_uri("bellows-pmix-control", uri_arg);
  if (uri == NULL) return 1;
  pmix_proc_t me;
  pmix_info_t attach;
  PMIX_INFO_LOAD(&attach, PMIX_SERVER_URI, uri, PMIX_STRING);
  pmix_status_t rc = PMIx_tool_init(&me, &attach, 1);
  PMIX_INFO_DESTRUCT(&attach);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "bellows-pmix-control: cannot attach to the PMIx server at %s: %s\n", uri, PMIx_Error_string(rc));
    free(uri);
    return 1;
  }
  free(uri);

  int status = 0;
  if (allocation) {
    pmix_status_t code = PMIX_NOTIFY_ALLOC_COMPLETE;
    const pmix_status_t handler = PMIx_Register_event_handler(&code, 1, NULL, 0, on_alloc_complete, NULL, NULL);
    if (handler < 0) {
      fprintf(stderr, "bellows-pmix-control: PMIx_Register_event_handler(PMIX_NOTIFY_ALLOC_COMPLETE): %s\n",
              PMIx_Error_string(handler));
      PMIx_tool_finalize();
      return 1;
    }
    char request_id[256] = {0};
    const bool extend = strcmp(command, "extend") == 0;
    const pmix_status_t taken = allocate(command, extend ? PMIX_ALLOC_EXTEND : PMIX_ALLOC_RELEASE, nodes, given_id,
                                         request_id, sizeof request_id);
    if (taken == PMIX_SUCCESS && cancel) {
      /* Called off at once, naming the request as the daemon echoed or gave it. */
      allocate("cancel", PMIX_ALLOC_REQ_CANCEL, 0, request_id[0] != '\0' ? request_id : given_id, NULL, 0);
    }
    if (taken == PMIX_SUCCESS && !wait_for_completions(1, wait_seconds)) {
      fprintf(stderr, "bellows-pmix-control: no PMIX_NOTIFY_ALLOC_COMPLETE for request %s within %d s\n", request_id,
              wait_seconds);
      status = 3;
    }
    PMIx_Deregister_event_handler((size_t)handler, NULL, NULL);
  } else if (strcmp(command, "signal") == 0) {
    job_control(command, args[0], args[1], PMIX_JOB_CTRL_SIGNAL, &signal_number, PMIX_INT, wait_seconds);
  } else if (strcmp(command, "terminate") == 0) {
    const bool yes = true;
    job_control(command, args[0], args[1], PMIX_JOB_CTRL_TERMINATE, &yes, PMIX_BOOL, wait_seconds);
  } else {
    const bool yes = true;
    job_control(command, args[0], args[1], args[2], &yes, PMIX_BOOL, wait_seconds);
  }
  rc = PMIx_tool_finalize();
  if (rc != PMIX_SUCCESS && status == 0) {
    fprintf(stderr, "bellows-pmix-control: PMIx_tool_finalize: %s\n", PMIx_Error_string(rc));
    status = 1;
  }
  return status;
}

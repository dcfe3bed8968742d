/* A PMIx-native client, written as any PMIx program is: PMIx_Init, PMIx_Put, PMIx_Commit,
 * PMIx_Fence, PMIx_Get, PMIx_Finalize, nothing of Bellows. Run as the program of `bellows run`,
 * one rank per node; each rank writes what it saw to OUTDIR/rank-R.json (one JSON object).
 *
 *   pmix_fence_client check OUTDIR
 *       Put "bellows.test.early" = "early-R", Commit, Fence over the namespace with
 *       PMIX_COLLECT_DATA, Get every peer's key (from the collected data); then Put
 *       "bellows.test.late" = "late-R", Commit, Fence without collecting, Get every peer's late key
 *       (by direct modex), and a Get of a rank the job does not have.
 *   pmix_fence_client victim OUTDIR VICTIM
 *       A first fence with collected data; then rank VICTIM writes its file and sleeps (the test
 *       kills it) while the others enter a second fence, whose status and duration they write.
 *   pmix_fence_client bench OUTDIR ROUNDS BYTES
 *       ROUNDS times: Put a value of BYTES bytes, Commit, Fence with PMIX_COLLECT_DATA; the
 *       seconds each fence took, in order.
 */
#include <pmix.h>

#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pmix_proc_t me;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static FILE* open_output(const char* dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/rank-%u.json.part", dir, me.rank);
  FILE* out = fopen(path, "w");
  if (out == NULL) {
    perror(path);
    exit(3);
  }
  return out;
}

/* Closes the output and renames it into place, so that a reader never sees half a file. */
static void close_output(FILE* out, const char* dir) {
  char part[4096];
  char done[4096];
  fclose(out);
  snprintf(part, sizeof part, "%s/rank-%u.json.part", dir, me.rank);
  snprintf(done, sizeof done, "%s/rank-%u.json", dir, me.rank);
  rename(part, done);
}

static pmix_status_t put_string(const char* key, const char* text) {
  pmix_value_t value;
  PMIX_VALUE_LOAD(&value, text, PMIX_STRING);
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &value);
  PMIX_VALUE_DESTRUCT(&value);
  if (rc != PMIX_SUCCESS) return rc;
  return PMIx_Commit();
}

static pmix_status_t fence(int collect) {
  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
  if (!collect) return PMIx_Fence(&all, 1, NULL, 0);
  pmix_info_t info;
  int yes = 1;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  pmix_status_t rc = PMIx_Fence(&all, 1, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  return rc;
}

/* A last fence without data among every rank but `absent` (none: UINT32_MAX), after the
 * results are written: `bellows run` ends the job when its first rank exits, so no rank leaves
 * before all are done. */
static void final_fence(uint32_t size, uint32_t absent) {
  pmix_proc_t* procs = calloc(size, sizeof *procs);
  size_t n = 0;
  if (procs == NULL) return;
  for (uint32_t r = 0; r < size; ++r) {
    if (r == absent) continue;
    PMIX_LOAD_PROCID(&procs[n], me.nspace, r); /* a macro: its argument is evaluated twice */
    ++n;
  }
  PMIx_Fence(procs, n, NULL, 0);
  free(procs);
}

/* Gets `key` of `rank`; 1 when it is the string "PREFIX-rank". *status gets PMIx's answer. */
static int peer_has(uint32_t rank, const char* key, const char* prefix, pmix_status_t* status) {
  pmix_proc_t peer;
  PMIX_LOAD_PROCID(&peer, me.nspace, rank);
  pmix_value_t* value = NULL;
  *status = PMIx_Get(&peer, key, NULL, 0, &value);
  if (*status != PMIX_SUCCESS || value == NULL) return 0;
  char expected[64];
  snprintf(expected, sizeof expected, "%s-%u", prefix, rank);
  int ok = value->type == PMIX_STRING && value->data.string != NULL && strcmp(value->data.string, expected) == 0;
  PMIX_VALUE_RELEASE(value);
  return ok;
}

static uint32_t job_size(void) {
  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* value = NULL;
  uint32_t size = 0;
  if (PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &value) == PMIX_SUCCESS && value != NULL) {
    if (value->type == PMIX_UINT32) size = value->data.uint32;
    PMIX_VALUE_RELEASE(value);
  }
  return size;
}

static int check(const char* dir, uint32_t size) {
  char text[64];
  snprintf(text, sizeof text, "early-%u", me.rank);
  pmix_status_t put = put_string("bellows.test.early", text);
  double start = now_seconds();
  pmix_status_t collected = fence(1);
  double collect_seconds = now_seconds() - start;
  unsigned early_ok = 0;
  pmix_status_t last_early = PMIX_SUCCESS;
  for (uint32_t r = 0; r < size; ++r) early_ok += (unsigned)peer_has(r, "bellows.test.early", "early", &last_early);

  snprintf(text, sizeof text, "late-%u", me.rank);
  pmix_status_t put_late = put_string("bellows.test.late", text);
  start = now_seconds();
  pmix_status_t plain = fence(0);
  double plain_seconds = now_seconds() - start;
  unsigned late_ok = 0;
  pmix_status_t last_late = PMIX_SUCCESS;
  for (uint32_t r = 0; r < size; ++r) late_ok += (unsigned)peer_has(r, "bellows.test.late", "late", &last_late);
  pmix_status_t missing = PMIX_SUCCESS;
  peer_has(size + 5, "bellows.test.late", "late", &missing);

  FILE* out = open_output(dir);
  fprintf(out,
          "{\"rank\": %u, \"size\": %u, \"put\": \"%s\", \"fence_collect\": \"%s\", \"fence_collect_seconds\": %.6f, "
          "\"early_ok\": %u, \"last_early_get\": \"%s\", \"put_late\": \"%s\", \"fence_plain\": \"%s\", "
          "\"fence_plain_seconds\": %.6f, \"late_ok\": %u, \"last_late_get\": \"%s\", \"missing_rank_get\": \"%s\"}\n",
          me.rank, size, PMIx_Error_string(put), PMIx_Error_string(collected), collect_seconds, early_ok,
          PMIx_Error_string(last_early), PMIx_Error_string(put_late), PMIx_Error_string(plain), plain_seconds,
          late_ok, PMIx_Error_string(last_late), PMIx_Error_string(missing));
  close_output(out, dir);
  final_fence(size, UINT32_MAX);
  return collected == PMIX_SUCCESS && plain == PMIX_SUCCESS && early_ok == size && late_ok == size ? 0 : 1;
}

static int victim(const char* dir, uint32_t size, uint32_t victim_rank) {
  char text[64];
  snprintf(text, sizeof text, "early-%u", me.rank);
  put_string("bellows.test.early", text);
  pmix_status_t first = fence(1);
  if (me.rank == victim_rank) {
    FILE* out = open_output(dir);
    fprintf(out, "{\"rank\": %u, \"size\": %u, \"first_fence\": \"%s\", \"victim\": true, \"pid\": %d}\n", me.rank,
            size, PMIx_Error_string(first), (int)getpid());
    close_output(out, dir);
    for (;;) pause();  // killed by the test
  }
  // The victim never enters: the fence waits for it until the test kills it.
  double start = now_seconds();
  pmix_status_t second = fence(1);
  double seconds = now_seconds() - start;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  FILE* out = open_output(dir);
  fprintf(out,
          "{\"rank\": %u, \"size\": %u, \"first_fence\": \"%s\", \"second_fence\": \"%s\", \"second_fence_code\": %d, "
          "\"second_fence_seconds\": %.6f, \"ended_at\": %.6f}\n",
          me.rank, size, PMIx_Error_string(first), PMIx_Error_string(second), (int)second, seconds,
          (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9);
  close_output(out, dir);
  final_fence(size, victim_rank);
  return 0;
}

static int bench(const char* dir, uint32_t size, unsigned rounds, unsigned bytes) {
  char* value = malloc(bytes + 1);
  double* seconds = calloc(rounds, sizeof *seconds);
  if (value == NULL || seconds == NULL) return 3;
  memset(value, 'a' + (int)(me.rank % 26), bytes);
  value[bytes] = '\0';
  pmix_status_t worst = PMIX_SUCCESS;
  for (unsigned i = 0; i < rounds; ++i) {
    char key[64];
    snprintf(key, sizeof key, "bellows.bench.%u", i);
    pmix_status_t rc = put_string(key, value);
    double start = now_seconds();
    if (rc == PMIX_SUCCESS) rc = fence(1);
    seconds[i] = now_seconds() - start;
    if (rc != PMIX_SUCCESS) worst = rc;
  }
  FILE* out = open_output(dir);
  fprintf(out, "{\"rank\": %u, \"status\": \"%s\", \"bytes\": %u, \"seconds\": [", me.rank, PMIx_Error_string(worst),
          bytes);
  for (unsigned i = 0; i < rounds; ++i) fprintf(out, "%s%.7f", i == 0 ? "" : ", ", seconds[i]);
  fprintf(out, "]}\n");
  close_output(out, dir);
  final_fence(size, UINT32_MAX);
  free(value);
  free(seconds);
  return worst == PMIX_SUCCESS ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s check|victim|bench OUTDIR [VICTIM | ROUNDS BYTES]\n", argv[0]);
    return 2;
  }
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_fence_client: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
    return 3;
  }
  const uint32_t size = job_size();
  int status = 2;
  if (strcmp(argv[1], "check") == 0) {
    status = check(argv[2], size);
  } else if (strcmp(argv[1], "victim") == 0 && argc == 4) {
    status = victim(argv[2], size, (uint32_t)strtoul(argv[3], NULL, 10));
  } else if (strcmp(argv[1], "bench") == 0 && argc == 5) {
    status = bench(argv[2], size, (unsigned)strtoul(argv[3], NULL, 10), (unsigned)strtoul(argv[4], NULL, 10));
  } else {
    fprintf(stderr, "pmix_fence_client: unknown mode or arguments\n");
  }
  PMIx_Finalize(NULL, 0);
  return status;
}

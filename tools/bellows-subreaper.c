/* bellows-subreaper: keeps the processes of a local Slurm cluster (scripts/local-slurm).
 *
 *   bellows-subreaper PIDFILE -- COMMAND [ARGS...]
 *
 * Marks itself as child subreaper (prctl PR_SET_CHILD_SUBREAPER), writes its pid to PIDFILE,
 * and runs COMMAND, which starts the daemons. Daemons detach from COMMAND (double fork), so
 * they, the slurmstepds and the job tasks are re-parented here instead of to PID 1, which on
 * some hosts never reaps orphans; this program reaps every one of them.
 *
 * It exits when nothing is left to keep (COMMAND and every re-parented process gone), with
 * COMMAND's exit status. On SIGTERM or SIGINT it stops what is left: SIGTERM to each child,
 * SIGKILL to those still there after a grace period (BELLOWS_SUBREAPER_GRACE_S, default 5 s),
 * repeated while processes keep being re-parented to it, then removes PIDFILE and exits 0.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { max_children = 4096 };

static void log_line(const char *what, const char *detail) {
  fprintf(stderr, "bellows-subreaper[%ld]: %s%s%s\n", (long)getpid(), what,
          detail ? ": " : "", detail ? detail : "");
}

/* Reaps every child that has exited; records COMMAND's status. Returns how many were reaped. */
static int reap(pid_t command, int *command_status, int *command_done) {
  int reaped = 0;
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return reaped;
    ++reaped;
    if (pid == command) {
      *command_done = 1;
      *command_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}

/* The pids whose parent is this process (from /proc/PID/stat); returns how many. */
static int list_children(pid_t *out, int capacity) {
  DIR *proc = opendir("/proc");
  if (!proc) return 0;
  const pid_t self = getpid();
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL && count < capacity) {
    char *end = NULL;
    const long pid = strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char buf[1024];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
    const char *close = strrchr(buf, ')');
    char state = 0;
    long ppid = 0;
    if (close && sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == self) {
      out[count++] = (pid_t)pid;
    }
  }
  closedir(proc);
  return count;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* SIGTERM to every child, SIGKILL after the grace period, until no child is left. */
static void stop_all(double grace_s, pid_t command, int *command_status, int *command_done) {
  static pid_t children[max_children];
  for (int round = 0;; ++round) {
    reap(command, command_status, command_done);
    int n = list_children(children, max_children);
    if (n == 0) return;
    for (int i = 0; i < n; ++i) kill(children[i], round == 0 ? SIGTERM : SIGKILL);
    const double deadline = now_s() + (round == 0 ? grace_s : 1.0);
    while (now_s() < deadline) {
      reap(command, command_status, command_done);
      if (list_children(children, max_children) == 0) break;
      const struct timespec pause = {0, 20 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: bellows-subreaper PIDFILE -- COMMAND [ARGS...]\n");
    return 2;
  }
  const char *pidfile = argv[1];
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    log_line("prctl(PR_SET_CHILD_SUBREAPER) failed", strerror(errno));
    return 1;
  }
  double grace_s = 5.0;
  const char *grace = getenv("BELLOWS_SUBREAPER_GRACE_S");
  if (grace && *grace) grace_s = atof(grace);

  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGHUP);
  sigprocmask(SIG_BLOCK, &handled, NULL);

  FILE *f = fopen(pidfile, "w");
  if (!f) {
    log_line("cannot write the pid file", strerror(errno));
    return 1;
  }
  fprintf(f, "%ld\n", (long)getpid());
  fclose(f);

  const pid_t command = fork();
  if (command < 0) {
    log_line("fork failed", strerror(errno));
    unlink(pidfile);
    return 1;
  }
  if (command == 0) {
    sigprocmask(SIG_UNBLOCK, &handled, NULL);
    execvp(argv[3], argv + 3);
    fprintf(stderr, "bellows-subreaper: cannot run %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }

  int command_status = 0;
  int command_done = 0;
  static pid_t children[max_children];
  for (;;) {
    const struct timespec timeout = {1, 0};
    siginfo_t info;
    const int sig = sigtimedwait(&handled, &info, &timeout);
    if (sig == SIGTERM || sig == SIGINT) {
      log_line("stopping every remaining process", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      stop_all(grace_s, command, &command_status, &command_done);
      unlink(pidfile);
      log_line("stopped", NULL);
      return 0;
    }
    if (sig == SIGHUP) continue;
    reap(command, &command_status, &command_done);
    if (command_done && list_children(children, max_children) == 0) {
      unlink(pidfile);
      log_line("nothing left to keep, exiting", NULL);
      return command_status;
    }
  }
}

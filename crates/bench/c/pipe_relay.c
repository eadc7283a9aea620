/* pipe_relay.c: the floor of one extra hop on the stdio face, in plain POSIX C.
 *
 *   pipe-relay-c [--] COMMAND [ARGS...]
 *
 * Starts COMMAND with its stdin and stdout on two pipes (its stderr is ours), then copies bytes
 * with poll() and read()/write() of up to 64 KiB: our stdin to the child's stdin, the child's
 * stdout to our stdout. No framing, no parsing, no threads. At the end of our stdin it closes the
 * child's stdin and keeps copying the child's stdout until that ends; then it waits for the child
 * and exits with its status. SIGTERM, SIGINT and SIGHUP are passed on to the child. On Linux it
 * dies with its parent (PR_SET_PDEATHSIG), as the tokio relay does.
 *
 * `mcp-supervisor-bench ts-peers` builds it with `cc -O2` (target `pipe-relay-c`). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define CHUNK 65536

static volatile sig_atomic_t child_pid = 0;

static void pass_on(int sig) {
  if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* Write all of buf to fd (waiting on poll if fd is non-blocking); 0 on success. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n > 0) {
      buf += n;
      len -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd out = {fd, POLLOUT, 0};
      if (poll(&out, 1, -1) < 0 && errno != EINTR) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* One read from `from`, written whole to `to`: 1 if bytes were copied, 0 if there was nothing to
 * read yet, -1 at the end or on an error. */
static int copy_chunk(int from, int to) {
  static char buf[CHUNK];
  ssize_t n = read(from, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (n <= 0) return -1;
  return write_all(to, buf, (size_t)n) == 0 ? 1 : -1;
}

int main(int argc, char **argv) {
  int first = 1;
  if (first < argc && strcmp(argv[first], "--") == 0) first++;
  if (first >= argc) {
    fprintf(stderr, "usage: pipe-relay-c [--] COMMAND [ARGS...]\n");
    return 2;
  }
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    perror("pipe-relay-c: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("pipe-relay-c: fork");
    return 1;
  }
  if (pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
    execvp(argv[first], argv + first);
    fprintf(stderr, "pipe-relay-c: cannot run %s: %s\n", argv[first], strerror(errno));
    _exit(127);
  }
  child_pid = pid;
  close(to_child[0]);
  close(from_child[1]);
  /* A reader that went away is an error of write(), not a signal that ends us. */
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pass_on;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {from_child[0], POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
      if (copy_chunk(STDIN_FILENO, to_child[1]) < 0) {
        /* Our stdin ended: so does the child's; its stdout is still copied to the end. */
        close(to_child[1]);
        fds[0].fd = -1;
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
      if (copy_chunk(from_child[0], STDOUT_FILENO) < 0) break;
    }
  }
  if (fds[0].fd >= 0) close(to_child[1]);
  close(from_child[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

/* See harness.h. POSIX only (the tests run on Linux, under valgrind). */
#define _GNU_SOURCE
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int test_failed;
const char *server_bin;
const char *scenario_dir;
const char *demo_scenario;

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (cond(arg)) return true;
    if (now_ms() >= deadline) return false;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
}

pid_t current_tid(void) { return (pid_t)syscall(SYS_gettid); }

char thread_state(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return '?';
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return '?';
  buf[n] = 0;
  /* "tid (comm) S ...": the state follows the last ')'. */
  char *p = strrchr(buf, ')');
  return (p && p[1] == ' ') ? p[2] : '?';
}

/* The contents of /proc/self/task/TID/NAME into buf (NUL-terminated), or "". */
static void read_task_file(pid_t tid, const char *name, char *buf, size_t cap) {
  char path[64];
  buf[0] = 0;
  snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
}

bool blocked_in_poll(pid_t tid) {
  if (thread_state(tid) != 'S') return false;
  char buf[256];
  read_task_file(tid, "wchan", buf, sizeof buf);
  if (strstr(buf, "poll") != NULL) return true;
  read_task_file(tid, "syscall", buf, sizeof buf);
  long nr = buf[0] ? strtol(buf, NULL, 10) : -1;
#ifdef SYS_poll
  if (nr == SYS_poll) return true;
#endif
  return nr == SYS_ppoll;
}

bool str_eq(PantoStr s, const char *want) {
  size_t n = strlen(want);
  return s.ptr != NULL && s.len == n && memcmp(s.ptr, want, n) == 0 && s.ptr[n] == 0;
}

bool str_contains(PantoStr s, const char *needle) {
  size_t n = strlen(needle);
  if (s.ptr == NULL || s.len < n) return false;
  for (size_t i = 0; i + n <= s.len; i++)
    if (memcmp(s.ptr + i, needle, n) == 0) return true;
  return false;
}

int server_start(TestServer *s, const char *scenario) {
  memset(s, 0, sizeof *s);
  s->pid = -1;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  char *argv[] = {(char *)server_bin, "--scenario", (char *)scenario, "--port", "0",
                  "--exit-on-stdin-eof", NULL};
  int rc = posix_spawn(&s->pid, server_bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  s->stdin_fd = in[1];
  s->stdout_fd = out[0];
  if (rc != 0) {
    fprintf(stderr, "cannot start %s: %s\n", server_bin, strerror(rc));
    s->pid = -1;
    server_stop(s);
    return -1;
  }
  /* First line: "listening on http://127.0.0.1:PORT". */
  char line[128];
  size_t len = 0;
  int64_t deadline = now_ms() + 20000;
  while (len < sizeof line - 1) {
    struct pollfd p = {s->stdout_fd, POLLIN, 0};
    int left = (int)(deadline - now_ms());
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    ssize_t n = read(s->stdout_fd, line + len, 1);
    if (n <= 0) break;
    if (line[len] == '\n') break;
    len++;
  }
  line[len] = 0;
  const char *prefix = "listening on http://127.0.0.1:";
  if (strncmp(line, prefix, strlen(prefix)) != 0) {
    fprintf(stderr, "test server did not start (first line: %s)\n", line);
    server_stop(s);
    return -1;
  }
  s->port = atoi(line + strlen(prefix));
  snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
  return 0;
}

void server_stop(TestServer *s) {
  if (s->stdin_fd > 0) close(s->stdin_fd);
  s->stdin_fd = -1;
  if (s->pid > 0) {
    int status;
    int64_t deadline = now_ms() + 10000;
    while (waitpid(s->pid, &status, WNOHANG) == 0) {
      if (now_ms() > deadline) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
        break;
      }
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
  s->pid = -1;
  if (s->stdout_fd > 0) close(s->stdout_fd);
  s->stdout_fd = -1;
}

int server_request(const TestServer *s, const char *method, const char *path, char *body,
                   size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)s->port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  char req[256];
  int n = snprintf(req, sizeof req,
                   "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                   "Connection: close\r\n\r\n",
                   method, path);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  char buf[8192];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    if (len == sizeof buf - 1) break;
  }
  close(fd);
  buf[len] = 0;
  int status = 0;
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
  if (body && cap) {
    const char *b = strstr(buf, "\r\n\r\n");
    b = b ? b + 4 : "";
    snprintf(body, cap, "%s", b);
  }
  return status;
}

char *server_get(const TestServer *s, const char *path) {
  enum { MAX = 4 << 20 };
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return NULL;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)s->port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
  char *buf = malloc(MAX + 1);
  if (!buf || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      write(fd, req, (size_t)n) != n) {
    free(buf);
    close(fd);
    return NULL;
  }
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, MAX - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    if (len == MAX) break;
  }
  close(fd);
  buf[len] = 0;
  int status = 0;
  const char *body = strstr(buf, "\r\n\r\n");
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || status != 200 || !body) {
    free(buf);
    return NULL;
  }
  body += 4;
  memmove(buf, body, strlen(body) + 1);
  return buf;
}

long server_stat(const TestServer *s, const char *field) {
  char body[2048];
  if (server_request(s, "GET", "/_panto/stats", body, sizeof body) != 200) return -1;
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", field);
  const char *p = strstr(body, key);
  return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

long server_client_connections(const TestServer *s) {
  long n = server_stat(s, "connections_open");
  return n < 0 ? -1 : n - 1;
}

int server_open_gate(const TestServer *s) {
  return server_request(s, "POST", "/_panto/gate/open", NULL, 0) == 200 ? 0 : -1;
}

const char *config_for(const TestServer *s, const char *key, const char *extra, char *buf,
                       size_t cap) {
  snprintf(buf, cap,
           "{\"provider\":\"openai\",\"model\":\"gpt-4o-mini\",\"base_url\":\"%s/v1\","
           "\"api_key\":\"%s\"%s}",
           s->url, key, extra ? extra : "");
  return buf;
}

static void *reset_server_loop(void *arg) {
  ResetServer *s = arg;
  for (;;) {
    struct pollfd p[2] = {{s->listen_fd, POLLIN, 0}, {s->stop_pipe[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    /* A small receive buffer, so the client's large body cannot all sit in the kernel. */
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    char buf[4096];
    size_t got = 0;
    while (got < s->read_bytes) {
      size_t want = s->read_bytes - got < sizeof buf ? s->read_bytes - got : sizeof buf;
      ssize_t n = read(fd, buf, want);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
    struct linger hard = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close(fd); /* RST: the client's next write fails with ECONNRESET, then EPIPE */
    s->accepted++;
  }
  return NULL;
}

int reset_server_start(ResetServer *s, size_t read_bytes) {
  memset(s, 0, sizeof *s);
  s->read_bytes = read_bytes;
  s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd < 0) return -1;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(s->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      listen(s->listen_fd, 16) != 0 ||
      getsockname(s->listen_fd, (struct sockaddr *)&addr, &len) != 0 ||
      pipe2(s->stop_pipe, O_CLOEXEC) != 0) {
    close(s->listen_fd);
    return -1;
  }
  s->port = ntohs(addr.sin_port);
  snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
  pthread_t *th = malloc(sizeof *th);
  if (th == NULL || pthread_create(th, NULL, reset_server_loop, s) != 0) {
    free(th);
    close(s->listen_fd);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    return -1;
  }
  s->thread = th;
  return 0;
}

void reset_server_stop(ResetServer *s) {
  if (s->thread == NULL) return;
  if (write(s->stop_pipe[1], "x", 1) != 1) { /* the loop also ends when the pipe closes */
  }
  pthread_join(*(pthread_t *)s->thread, NULL);
  free(s->thread);
  s->thread = NULL;
  close(s->listen_fd);
  close(s->stop_pipe[0]);
  close(s->stop_pipe[1]);
}

char *scenario(const char *name) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s", scenario_dir, name);
  return path;
}

char *shared_scenario(const char *name) {
  static char path[4096];
  const char *slash = strrchr(demo_scenario, '/');
  int dir = slash ? (int)(slash - demo_scenario) : 1;
  snprintf(path, sizeof path, "%.*s/%s", dir, slash ? demo_scenario : ".", name);
  return path;
}

PantoAgent *new_agent(const TestServer *s, const char *key, const char *extra) {
  char cfg[2048];
  config_for(s, key, extra, cfg, sizeof cfg);
  PantoAgent *agent = NULL;
  PantoError *err = NULL;
  if (panto_agent_new(cfg, strlen(cfg), &agent, &err) != PANTO_OK) {
    PantoStr m = panto_error_message(err);
    fprintf(stderr, "panto_agent_new: %.*s\n", (int)m.len, m.ptr);
    panto_error_free(err);
    return NULL;
  }
  return agent;
}

PantoStream *start_stream(PantoAgent *agent, const char *input) {
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  if (panto_agent_stream(agent, input, strlen(input), &stream, &err) != PANTO_OK) {
    PantoStr m = panto_error_message(err);
    fprintf(stderr, "panto_agent_stream: %.*s\n", (int)m.len, m.ptr);
    panto_error_free(err);
    return NULL;
  }
  return stream;
}

PantoStatus drain(PantoStream *stream, PantoUsage *usage) {
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      PantoToolCallStart *t = &ev.payload.tool_call_start;
      const char *out = "sunny";
      if (panto_stream_submit_tool_result(stream, t->call_id.ptr, t->call_id.len, out,
                                          strlen(out), false, NULL) != PANTO_OK)
        return PANTO_ERROR;
    }
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && usage) *usage = ev.payload.message_complete.usage;
  }
  return st;
}

int start_agent(Turn *t, const char *scenario, const char *key, const char *extra) {
  memset(t, 0, sizeof *t);
  if (server_start(&t->srv, scenario) != 0) return -1;
  t->agent = new_agent(&t->srv, key, extra);
  return t->agent != NULL ? 0 : -1;
}

int start_turn(Turn *t, const char *scenario, const char *key, const char *extra,
               const char *prompt) {
  if (start_agent(t, scenario, key, extra) != 0) return -1;
  t->stream = start_stream(t->agent, prompt);
  return t->stream != NULL ? 0 : -1;
}

void end_turn(Turn *t) {
  panto_stream_free(t->stream);
  t->stream = NULL;
  panto_agent_free(t->agent);
  t->agent = NULL;
  server_stop(&t->srv);
}

pid_t wait_child(pid_t pid, int *status, int64_t timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  pid_t got;
  while ((got = waitpid(pid, status, WNOHANG)) == 0 && now_ms() < deadline) {
    struct timespec ms = {0, 5000000};
    nanosleep(&ms, NULL);
  }
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
  }
  return got;
}

bool stat_is(void *stat_wait) {
  StatWait *w = stat_wait;
  return server_stat(w->srv, w->field) == w->want;
}

bool no_client_connection(void *srv) { return server_client_connections(srv) == 0; }

/* ---- MCP servers ------------------------------------------------------------------ */

bool mcp_no_process_with(void *marker) {
  DIR *d = opendir("/proc");
  if (d == NULL) return true;
  bool none = true;
  struct dirent *e;
  while (none && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], cmd[4096];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    size_t n = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
      if (cmd[i] == 0) cmd[i] = ' ';
    cmd[n] = 0;
    if (strstr(cmd, (const char *)marker) != NULL) none = false;
  }
  closedir(d);
  return none;
}

bool no_thread_named(void *prefix) {
  const char *want = (const char *)prefix;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return true;
  bool none = true;
  struct dirent *e;
  while (none && (e = readdir(d)) != NULL) {
    char path[300], comm[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, want, strlen(want)) == 0)
      none = false;
    fclose(f);
  }
  closedir(d);
  return none;
}

bool mcp_no_stop_thread(void *unused) {
  (void)unused;
  return no_thread_named("panto-mcp-stop");
}

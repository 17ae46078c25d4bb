/* C tests of MCP OAuth (panto_agent_set_mcp_oauth): the host's token store and URL
 * opener against the OAuth-protected fixture server (tests/mcp/oauth_server.py, the
 * `mcp` package's resource and authorization servers on loopback, from the venv run.sh
 * makes: $PANTO_MCP_VENV). The opener runs tests/mcp/browser.py, which follows the
 * authorization URL to panto's loopback redirect.
 *
 * The callbacks run on libpanto's threads. Every field of the host state they touch is
 * read and written only under `host.mu` — by the callbacks, and by this thread when it
 * resets the state after the agent exists and reads the results — and the state is
 * static, so it outlives every callback; the test waits for free_user_data (which no
 * callback can follow) before it reads the final counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

extern char **environ;

typedef struct OAuthHost {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char saved_url[256];
  char saved[8192];
  size_t saved_len;
  int loads, saves, opens, frees;
  char python[PATH_MAX];
  char browser[PATH_MAX];
} OAuthHost;

static OAuthHost host = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}, 0,
                         0, 0, 0, 0, {0}, {0}};

static size_t load_tokens(void *user_data, const char *url, size_t url_len, char *buf,
                          size_t cap) {
  OAuthHost *h = user_data;
  size_t n = 0;
  pthread_mutex_lock(&h->mu);
  h->loads++;
  if (h->saved_len > 0 && strlen(h->saved_url) == url_len &&
      memcmp(h->saved_url, url, url_len) == 0) {
    n = h->saved_len;
    if (n <= cap) memcpy(buf, h->saved, n);
  }
  pthread_mutex_unlock(&h->mu);
  return n;
}

static void save_tokens(void *user_data, const char *url, size_t url_len, const char *tokens,
                        size_t tokens_len) {
  OAuthHost *h = user_data;
  pthread_mutex_lock(&h->mu);
  h->saves++;
  if (url_len < sizeof h->saved_url && tokens_len <= sizeof h->saved && url[url_len] == 0 &&
      tokens[tokens_len] == 0) {
    memcpy(h->saved_url, url, url_len + 1);
    memcpy(h->saved, tokens, tokens_len);
    h->saved_len = tokens_len;
  }
  pthread_mutex_unlock(&h->mu);
}

/* Follows the URL with tests/mcp/browser.py, waiting for it: a host's opener may block
 * until the sign-in is done. */
static int open_url(void *user_data, const char *url, size_t url_len) {
  OAuthHost *h = user_data;
  char python[PATH_MAX], browser[PATH_MAX];
  pthread_mutex_lock(&h->mu);
  h->opens++;
  memcpy(python, h->python, sizeof python);
  memcpy(browser, h->browser, sizeof browser);
  pthread_mutex_unlock(&h->mu);
  if (url[url_len] != 0) return 1;
  char *argv[] = {python, browser, (char *)url, NULL};
  pid_t pid;
  if (posix_spawn(&pid, python, NULL, NULL, argv, environ) != 0) return 2;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}

static void free_host(void *user_data) {
  OAuthHost *h = user_data;
  pthread_mutex_lock(&h->mu);
  h->frees++;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Waits (at most 60 s) until free_user_data was called `n` times in all. */
static bool wait_frees(int n) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 60;
  pthread_mutex_lock(&host.mu);
  while (host.frees < n) {
    if (pthread_cond_timedwait(&host.cv, &host.mu, &deadline) == ETIMEDOUT) break;
  }
  bool done = host.frees >= n;
  pthread_mutex_unlock(&host.mu);
  return done;
}

/* The fixture server: its pid and port. */
static pid_t start_oauth_server(const char *python, int *port) {
  char script[PATH_MAX];
  if (realpath("tests/mcp/oauth_server.py", script) == NULL) return -1;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0);
  char *argv[] = {(char *)python, script, NULL};
  pid_t pid;
  int r = posix_spawn(&pid, python, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (r != 0) {
    close(fds[0]);
    return -1;
  }
  char line[64] = {0};
  size_t n = 0;
  while (n < sizeof line - 1) {
    ssize_t got = read(fds[0], line + n, 1);
    if (got <= 0 || line[n] == '\n') break;
    n++;
  }
  close(fds[0]);
  if (sscanf(line, "PORT %d", port) != 1) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return pid;
}

/* One turn on a new agent for `srv` with the MCP server at `url` and the host's hooks:
 * the whoami tool's output into `who`. 0 on success. */
static int oauth_turn(const TestServer *srv, const char *url, char *who, size_t cap) {
  char extra[512];
  PantoError *err = NULL;
  PantoStream *stream = NULL;
  int rc = -1;
  snprintf(extra, sizeof extra, ",\"mcp_servers\":{\"sec\":{\"url\":\"%s\",\"oauth\":{}}}", url);
  PantoAgent *agent = new_agent(srv, "sk-c", extra);
  CHECK(agent != NULL);
  PantoMcpOAuthHooks hooks = {load_tokens, save_tokens, open_url, &host, free_host};
  CHECK(panto_agent_set_mcp_oauth(agent, &hooks, &err) == PANTO_OK);
  stream = start_stream(agent, "who am i");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  who[0] = 0;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_RESULT) {
      CHECKF(!ev.payload.tool_result.is_error, "%.*s", (int)ev.payload.tool_result.output.len,
             ev.payload.tool_result.output.ptr);
      snprintf(who, cap, "%.*s", (int)ev.payload.tool_result.output.len,
               ev.payload.tool_result.output.ptr);
    }
  }
  if (st == PANTO_ERROR && ev.kind == PANTO_EV_ERROR)
    fprintf(stderr, "turn failed: %.*s\n", (int)ev.payload.error.message.len,
            ev.payload.error.message.ptr);
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  rc = 0;
out:
  if (err != NULL) panto_error_free(err);
  panto_stream_free(stream);
  panto_agent_free(agent);
  return rc;
}

static void test_mcp_oauth_hooks(void) {
  const char *venv = getenv("PANTO_MCP_VENV");
  TestServer srv = {0};
  pid_t fixture = -1;
  int port = 0;
  char url[128], want[256], who[512];
  CHECKF(venv != NULL, "%s", "PANTO_MCP_VENV is not set (capi/tests/c/run.sh sets it)");
  /* The state is the callbacks' from the first set call on: written under the lock. */
  pthread_mutex_lock(&host.mu);
  snprintf(host.python, sizeof host.python, "%s/bin/python", venv);
  bool found = realpath("tests/mcp/browser.py", host.browser) != NULL;
  host.saved_len = 0;
  host.loads = host.saves = host.opens = host.frees = 0;
  char python[PATH_MAX];
  memcpy(python, host.python, sizeof python);
  pthread_mutex_unlock(&host.mu);
  CHECK(found);
  fixture = start_oauth_server(python, &port);
  CHECK(fixture > 0);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/mcp", port);
  CHECK(server_start(&srv, scenario("mcp-oauth.json")) == 0);

  /* First run: nothing saved; panto registers, the browser signs in, the token is
   * saved. */
  CHECK(oauth_turn(&srv, url, who, sizeof who) == 0);
  CHECK(wait_frees(1));
  snprintf(want, sizeof want, " resource %s", url);
  CHECKF(strncmp(who, "client ", 7) == 0 && strstr(who, want) != NULL &&
             strstr(who, "panto-cc") == NULL,
         "%s", who);
  pthread_mutex_lock(&host.mu);
  int loads = host.loads, saves = host.saves, opens = host.opens;
  bool keyed = strcmp(host.saved_url, url) == 0 && host.saved_len > 0;
  pthread_mutex_unlock(&host.mu);
  CHECKF(loads >= 1 && saves == 1 && opens == 1 && keyed, "loads %d saves %d opens %d", loads,
         saves, opens);

  /* Second run (a new agent): the saved token is loaded, no one signs in again. */
  char again[512];
  CHECK(oauth_turn(&srv, url, again, sizeof again) == 0);
  CHECK(wait_frees(2));
  CHECKF(strcmp(again, who) == 0, "%s / %s", again, who);
  pthread_mutex_lock(&host.mu);
  opens = host.opens;
  saves = host.saves;
  int frees = host.frees;
  pthread_mutex_unlock(&host.mu);
  CHECKF(opens == 1 && saves == 1 && frees == 2, "opens %d saves %d frees %d", opens, saves,
         frees);

  /* Without MCP servers: a config error, and user_data stays the caller's. */
  {
    PantoError *err = NULL;
    PantoAgent *plain = new_agent(&srv, "sk-c", "");
    CHECK(plain != NULL);
    PantoMcpOAuthHooks hooks = {NULL, NULL, NULL, &host, free_host};
    PantoStatus st = panto_agent_set_mcp_oauth(plain, &hooks, &err);
    bool config = err != NULL && panto_error_kind(err) == PANTO_ERR_CONFIG;
    if (err != NULL) panto_error_free(err);
    panto_agent_free(plain);
    CHECK(st == PANTO_ERROR && config);
    pthread_mutex_lock(&host.mu);
    frees = host.frees;
    pthread_mutex_unlock(&host.mu);
    CHECK(frees == 2);
  }
out:
  server_stop(&srv);
  if (fixture > 0) {
    kill(fixture, SIGKILL);
    waitpid(fixture, NULL, 0);
  }
}

static const TestCase TESTS[] = {
    {"mcp_oauth_hooks", test_mcp_oauth_hooks},
};
const TestSuite MCP_OAUTH_TESTS = {"test_mcp_oauth.c", TESTS, sizeof TESTS / sizeof TESTS[0]};

/* Test harness for the C ABI tests: checks, the scripted provider server
 * (panto-testserver, a subprocess), a minimal HTTP client for its control endpoints,
 * waiting for a condition with a deadline, the test suites, and what most tests start
 * from (a Turn: a server, an agent and a stream). */
#ifndef PANTO_TEST_HARNESS_H
#define PANTO_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#include "panto.h"

/* Set by a failed CHECK; a test function jumps to its `out:` label to clean up. */
extern int test_failed;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
      test_failed = 1;                                                               \
      goto out;                                                                      \
    }                                                                                \
  } while (0)

/* Like CHECK, with a printf-style explanation. */
#define CHECKF(cond, ...)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
      test_failed = 1;                                                               \
      goto out;                                                                      \
    }                                                                                \
  } while (0)

/* A running panto-testserver. */
typedef struct TestServer {
  pid_t pid;
  int stdin_fd;  /* closing it stops the server (--exit-on-stdin-eof) */
  int stdout_fd;
  int port;
  char url[64]; /* http://127.0.0.1:PORT */
} TestServer;

/* Paths given on the command line: the server binary and the scenario directories. */
extern const char *server_bin;
extern const char *scenario_dir;

/* Starts the server on port 0 with `scenario` (a path). Returns 0 on success. */
int server_start(TestServer *s, const char *scenario);
/* Stops it and waits for it to exit; nothing for a zeroed, failed or stopped server. */
void server_stop(TestServer *s);
/* POST (or GET) a control endpoint; returns the HTTP status, body into `body`. */
int server_request(const TestServer *s, const char *method, const char *path, char *body,
                   size_t cap);
/* GET `path`'s whole body (at most 4 MiB), NUL-terminated, owned by the caller (free);
 * NULL unless the status is 200. */
char *server_get(const TestServer *s, const char *path);
/* An integer field of GET /_panto/stats, -1 on failure. */
long server_stat(const TestServer *s, const char *field);
int server_open_gate(const TestServer *s);
/* Connections open to the server other than the one asking (stats counts itself). */
long server_client_connections(const TestServer *s);

/* A TCP server on 127.0.0.1 (port 0) that accepts connections, reads at most
 * `read_bytes` of each, then resets it (SO_LINGER 0): a server that hangs up while the
 * client is still writing its request. Runs on its own thread until reset_server_stop. */
typedef struct ResetServer {
  int listen_fd;
  int port;
  size_t read_bytes;
  int stop_pipe[2];
  long accepted; /* connections accepted and reset (read after stop) */
  char url[64];
  void *thread; /* pthread_t, opaque here */
} ResetServer;
int reset_server_start(ResetServer *s, size_t read_bytes);
void reset_server_stop(ResetServer *s);

/* The agent configuration for `s`: OpenAI-compatible, api_key `key`, `extra` appended
 * verbatim inside the object (e.g. ",\"queue_capacity\":4"), into buf. */
const char *config_for(const TestServer *s, const char *key, const char *extra, char *buf,
                       size_t cap);

/* Milliseconds on a monotonic clock. */
int64_t now_ms(void);
/* Polls `cond(arg)` every millisecond until it holds or `timeout_ms` passes. */
bool wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms);

/* The Linux thread id of the calling thread, and the scheduler state letter of a
 * thread of this process (from /proc/self/task/TID/stat: 'S' = sleeping), or '?'. */
pid_t current_tid(void);
char thread_state(pid_t tid);
/* Thread `tid` of this process sleeps inside poll()/ppoll(): its state is 'S' and its
 * kernel wait channel (/proc/self/task/TID/wchan) is poll's, or — on a kernel that hides
 * wait channels — the system call it is in (/proc/self/task/TID/syscall) is poll or
 * ppoll. */
bool blocked_in_poll(pid_t tid);

/* A named test. Each test file lists its own in a suite (a file's test functions are
 * static, so one missing from its list fails the build: -Werror=unused-function);
 * test_capi.c's main runs every suite. */
typedef struct TestCase {
  const char *name;
  void (*run)(void);
} TestCase;
typedef struct TestSuite {
  const char *file;
  const TestCase *tests;
  size_t count;
} TestSuite;
extern const TestSuite TURN_TESTS;         /* test_turn.c: a turn, its events, their JSON */
extern const TestSuite ERROR_TESTS;        /* test_errors.c: errors, misuse, limits */
extern const TestSuite THREAD_TESTS;       /* test_threads.c: cancel, free, consumers */
extern const TestSuite CONVERSATION_TESTS; /* test_conversation.c: reasoning, compaction */
extern const TestSuite ATTACHMENT_TESTS;   /* test_attachments.c: images in and out */
extern const TestSuite MCP_TESTS;          /* test_mcp.c: MCP servers from the config */
extern const TestSuite MCP_EVERYTHING_TESTS; /* test_mcp_everything.c: the MCP reference server */
extern const TestSuite MCP_SAMPLING_TESTS; /* test_mcp_sampling.c: MCP sampling and elicitation */
extern const TestSuite FORK_TESTS;         /* test_fork.c: the pre-fork server pattern */
extern const TestSuite READINESS_TESTS;    /* test_readiness.c: descriptors, ready sets */
extern const TestSuite DURABLE_TESTS;      /* test_durable.c: durable turns (ABI 1.3) */
extern const TestSuite MCP_OAUTH_TESTS;    /* test_mcp_oauth.c: OAuth callbacks (ABI 1.3) */
extern const TestSuite MCP_RESOURCE_TESTS; /* test_mcp_resources.c: resources, prompts */
extern const TestSuite PRODUCTION_TESTS;   /* test_production.c: token counts, limits */
extern const TestSuite TELEMETRY_TESTS;    /* test_telemetry.c: OTLP export (ABI 1.3) */

/* ---- What a test starts from ------------------------------------------------------ */

/* The scenarios named on the command line: SCENARIO_DIR/`name` (the C tests' own), and
 * `name` beside DEMO_SCENARIO (tests/server/scenarios, shared with the other languages).
 * Each returns a static buffer, valid until its next call. */
extern const char *demo_scenario;
char *scenario(const char *name);
char *shared_scenario(const char *name);

/* An agent for `s` (config_for(s, key, extra)), or NULL after printing why. */
PantoAgent *new_agent(const TestServer *s, const char *key, const char *extra);
/* A stream of `input` on `agent` (panto_agent_stream), or NULL after printing why. */
PantoStream *start_stream(PantoAgent *agent, const char *input);
/* Drains a turn to its end, answering every host tool call "sunny". Returns the last
 * status (PANTO_DONE when the turn completed); message_complete's usage into *usage. */
PantoStatus drain(PantoStream *stream, PantoUsage *usage);

/* A server running a scenario, an agent configured for it and a stream: what most tests
 * start from. end_turn frees whichever of them was made, so a test that fails half-way
 * (or whose start failed) jumps to `out:` and calls it. */
typedef struct Turn {
  TestServer srv;
  PantoAgent *agent;
  PantoStream *stream; /* NULL after start_agent */
} Turn;
/* Starts a server with `scenario` and makes an agent for it (new_agent(key, extra)).
 * 0 on success; else -1, having said why on stderr. */
int start_agent(Turn *t, const char *scenario, const char *key, const char *extra);
/* start_agent, then starts a stream of `prompt`. 0 on success, else -1. */
int start_turn(Turn *t, const char *scenario, const char *key, const char *extra,
               const char *prompt);
/* Frees the stream, then the agent, then stops the server. Safe after a failed start,
 * twice, and on a zeroed Turn (`Turn t = {0}`: one a test may leave unstarted). */
void end_turn(Turn *t);

/* Waits up to `timeout_ms` for child `pid` to exit (its status into *status); a child
 * still running then is killed. Returns waitpid's answer: pid if it exited in time. */
pid_t wait_child(pid_t pid, int *status, int64_t timeout_ms);

/* Statistic `field` of the server (GET /_panto/stats) equals `want`: for wait_until. */
typedef struct StatWait {
  const TestServer *srv;
  const char *field;
  long want;
} StatWait;
bool stat_is(void *stat_wait);
/* No connection from panto to the server (a TestServer *) is left open. */
bool no_client_connection(void *srv);

/* No process's command line holds `marker` (a const char *): an MCP server started with
 * it is gone. For wait_until. */
bool mcp_no_process_with(void *marker);
/* No thread of this process has a name starting with `prefix` (a const char *). For
 * wait_until. */
bool no_thread_named(void *prefix);
/* No thread of this process is a "panto-mcp-stop" thread (stopping an MCP server).
 * For wait_until; the argument is unused. */
bool mcp_no_stop_thread(void *unused);

/* PantoStr helpers. */
bool str_eq(PantoStr s, const char *want);
bool str_contains(PantoStr s, const char *needle);

#endif

/* C tests of the MCP servers' resources and prompts (ABI 1.3):
 * panto_agent_mcp_resources, _read_resource, _prompts and _get_prompt against the
 * fixture server (tests/mcp/fixture_server.py from $PANTO_MCP_VENV, which run.sh makes),
 * their errors, and a read cancelled from another thread. No provider is involved: the
 * calls ask the servers of the agent's configuration directly. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

/* An agent whose one MCP server "fx" is the fixture, started with --cancel-marker
 * `marker` (which also tells its process apart); NULL after saying why. */
static PantoAgent *fixture_agent(const char *marker) {
  const char *venv = getenv("PANTO_MCP_VENV");
  char fixture[PATH_MAX], cfg[2048];
  if (venv == NULL) {
    fprintf(stderr, "PANTO_MCP_VENV is not set (capi/tests/c/run.sh sets it)\n");
    return NULL;
  }
  if (realpath("tests/mcp/fixture_server.py", fixture) == NULL) return NULL;
  int n = snprintf(cfg, sizeof cfg,
                   "{\"model\":\"m\",\"api_key\":\"sk-c\",\"mcp_servers\":{\"fx\":{"
                   "\"command\":\"%s/bin/python\",\"args\":[\"%s\",\"--cancel-marker\","
                   "\"%s\"]}}}",
                   venv, fixture, marker);
  if (n <= 0 || (size_t)n >= sizeof cfg) return NULL;
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

/* Frees the agent and waits until its server and the thread stopping it are gone. */
static bool free_and_wait(PantoAgent *agent, const char *marker) {
  panto_agent_free(agent);
  return wait_until(mcp_no_process_with, (void *)marker, 60000) &&
         wait_until(mcp_no_stop_thread, NULL, 60000);
}

static bool has(const PantoString *s, const char *needle) {
  PantoStr view = {s->ptr, s->len};
  return s->ptr != NULL && str_contains(view, needle);
}

/* Every call on the fixture: its JSON, and the errors of a missing resource, bad
 * arguments, and an agent without MCP servers. */
static void test_mcp_resources_and_prompts(void) {
  char marker[64];
  snprintf(marker, sizeof marker, "panto-c-mcp-res-%d", (int)getpid());
  PantoAgent *agent = fixture_agent(marker), *plain = NULL;
  PantoString out = {0};
  PantoError *err = NULL;
  CHECK(agent != NULL);

  CHECK(panto_agent_mcp_resources(agent, NULL, 0, NULL, &out, &err) == PANTO_OK);
  /* Keys are in the order of their names. */
  CHECKF(has(&out, "\"name\":\"notes\",\"server\":\"fx\",\"title\":\"The notes\","
                   "\"uri\":\"fixture://notes\""),
         "%.*s", (int)out.len, out.ptr);
  CHECK(has(&out, "\"uri\":\"fixture://data.bin\""));
  panto_string_free(&out);

  /* Server NULL: the only one. The content comes with the part a turn takes. */
  const char *uri = "fixture://notes";
  CHECK(panto_agent_mcp_read_resource(agent, NULL, 0, uri, strlen(uri), NULL, &out, &err) ==
        PANTO_OK);
  CHECKF(has(&out, "\"text\":\"the notes\"") &&
             has(&out, "\"part\":{\"text\":\"[resource: fixture://notes type text/plain]\\nthe notes\","
                       "\"type\":\"text\"}"),
         "%.*s", (int)out.len, out.ptr);
  panto_string_free(&out);
  const char *bin = "fixture://data.bin";
  CHECK(panto_agent_mcp_read_resource(agent, "fx", 2, bin, strlen(bin), NULL, &out, &err) ==
        PANTO_OK);
  CHECKF(has(&out, "\"blob\":\"AAEC\""), "%.*s", (int)out.len, out.ptr);
  panto_string_free(&out);

  const char *missing = "fixture://nothing";
  CHECK(panto_agent_mcp_read_resource(agent, NULL, 0, missing, strlen(missing), NULL, &out,
                                      &err) == PANTO_ERROR);
  CHECK(out.ptr == NULL && err != NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_NOT_FOUND);
  CHECK(str_contains(panto_error_message(err), "no resource fixture://nothing"));
  panto_error_free(err);
  err = NULL;

  CHECK(panto_agent_mcp_prompts(agent, "fx", 2, NULL, &out, &err) == PANTO_OK);
  CHECKF(has(&out, "\"name\":\"greet\"") && has(&out, "\"required\":true"), "%.*s",
         (int)out.len, out.ptr);
  panto_string_free(&out);
  const char *args = "{\"name\":\"C\"}";
  CHECK(panto_agent_mcp_get_prompt(agent, NULL, 0, "greet", 5, args, strlen(args), NULL, &out,
                                   &err) == PANTO_OK);
  CHECKF(has(&out, "{\"text\":\"Say hello to C\",\"type\":\"text\"}") &&
             has(&out, "\"role\":\"assistant\""),
         "%.*s", (int)out.len, out.ptr);
  panto_string_free(&out);
  /* The server's -32602 for a missing argument; arguments that are no object of
   * strings are refused before anything is sent. */
  CHECK(panto_agent_mcp_get_prompt(agent, NULL, 0, "greet", 5, NULL, 0, NULL, &out, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_BAD_REQUEST);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_agent_mcp_get_prompt(agent, NULL, 0, "greet", 5, "[1]", 3, NULL, &out, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  /* An unknown server. */
  CHECK(panto_agent_mcp_prompts(agent, "nope", 4, NULL, &out, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "(the servers: fx)"));
  panto_error_free(err);
  err = NULL;

  /* An agent without MCP servers. */
  const char *cfg = "{\"model\":\"m\",\"api_key\":\"sk-c\"}";
  CHECK(panto_agent_new(cfg, strlen(cfg), &plain, &err) == PANTO_OK);
  CHECK(panto_agent_mcp_resources(plain, NULL, 0, NULL, &out, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "no MCP servers"));
  panto_error_free(err);
  err = NULL;
  /* NULL out. */
  CHECK(panto_agent_mcp_prompts(agent, NULL, 0, NULL, NULL, &err) == PANTO_ERROR);
  panto_error_free(err);
  err = NULL;

  CHECKF(free_and_wait(agent, marker), "%s", "the MCP server outlived its agent");
  agent = NULL;
out:
  panto_string_free(&out);
  if (err != NULL) panto_error_free(err);
  panto_agent_free(plain);
  if (agent != NULL) free_and_wait(agent, marker);
}

/* A read on a thread of the test's own, which the main thread cancels. Everything the
 * two threads share is written before pthread_create or read after pthread_join. */
typedef struct Read {
  PantoAgent *agent;
  PantoCancelToken *token;
  PantoStatus status;
  uint32_t kind;
} Read;

static void *read_hang(void *arg) {
  Read *r = arg;
  PantoString out = {0};
  PantoError *err = NULL;
  const char *uri = "fixture://hang";
  r->status = panto_agent_mcp_read_resource(r->agent, NULL, 0, uri, strlen(uri), r->token,
                                            &out, &err);
  r->kind = err != NULL ? panto_error_kind(err) : 0;
  panto_string_free(&out);
  panto_error_free(err);
  return NULL;
}

static bool file_exists(void *path) { return access((const char *)path, F_OK) == 0; }

static void test_mcp_read_resource_is_cancelled_from_another_thread(void) {
  char marker[128], started[160];
  snprintf(marker, sizeof marker, "/tmp/panto-c-mcp-cancel-%d", (int)getpid());
  snprintf(started, sizeof started, "%s.started", marker);
  unlink(marker);
  unlink(started);
  PantoAgent *agent = fixture_agent(marker);
  PantoCancelToken *token = panto_cancel_token_new();
  Read r = {agent, token, PANTO_OK, 0};
  pthread_t thread;
  bool running = false;
  CHECK(agent != NULL && token != NULL);
  CHECK(pthread_create(&thread, NULL, read_hang, &r) == 0);
  running = true;
  /* The server got the read: the call is blocked waiting for its answer. */
  CHECKF(wait_until(file_exists, started, 60000), "%s", "the server never got the read");
  CHECK(!file_exists(marker));
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  CHECK(pthread_join(thread, NULL) == 0);
  running = false;
  CHECK(r.status == PANTO_ERROR && r.kind == PANTO_ERR_CANCELLED);
  /* The request was withdrawn: the server saw notifications/cancelled. */
  CHECKF(wait_until(file_exists, marker, 60000), "%s", "the server was not told");
  /* A token already cancelled fails at once. */
  PantoString out = {0};
  PantoError *err = NULL;
  CHECK(panto_agent_mcp_prompts(agent, NULL, 0, token, &out, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CANCELLED);
  panto_error_free(err);
  CHECKF(free_and_wait(agent, marker), "%s", "the MCP server outlived its agent");
  agent = NULL;
out:
  if (running) {
    panto_cancel_token_cancel(token);
    pthread_join(thread, NULL);
  }
  if (agent != NULL) free_and_wait(agent, marker);
  panto_cancel_token_free(token);
  unlink(marker);
  unlink(started);
}

static const TestCase TESTS[] = {
    {"mcp_resources_and_prompts", test_mcp_resources_and_prompts},
    {"mcp_read_resource_is_cancelled_from_another_thread",
     test_mcp_read_resource_is_cancelled_from_another_thread},
};
const TestSuite MCP_RESOURCE_TESTS = {"test_mcp_resources.c", TESTS,
                                      sizeof TESTS / sizeof TESTS[0]};

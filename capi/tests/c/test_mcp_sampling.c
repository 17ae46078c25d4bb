/* C tests of an MCP server's own requests, against the reference server
 * (@modelcontextprotocol/server-everything, installed by tests/mcp/everything.sh; run.sh
 * puts its entry point in $PANTO_EVERYTHING). Through the configuration and events
 * alone: with "sampling" and "elicitation" enabled for the server, its sampling request
 * is answered by the agent's model (capped at "sampling_max_tokens") and its elicitation
 * declined, each reported by its event before the call's result. With the host's hooks
 * (panto_agent_set_mcp_client_hooks): an approved sampling request is answered by the
 * model and a refused one is an error for the server with no model request made; an
 * elicitation accepted with content gives the tool that content, and one answered with
 * something that is not an answer is declined. Without node and npm (outside CI) the
 * tests say they skipped.
 *
 * The hooks run on libpanto's threads. Every field of the host state they touch is read
 * and written only under `hooks.mu` — by the callbacks, and by this thread when it sets
 * up a case and reads the results — and the state is static, so it outlives every
 * callback; a test waits for free_user_data (which no callback can follow) before it
 * reads the final counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "panto.h"

static bool contains(PantoStr s, const char *want) {
  size_t n = strlen(want);
  if (s.len < n) return false;
  for (size_t i = 0; i + n <= s.len; i++) {
    if (memcmp(s.ptr + i, want, n) == 0) return true;
  }
  return false;
}

static void test_mcp_sampling_and_elicitation_events(void) {
  const char *entry = getenv("PANTO_EVERYTHING");
  Turn turn = {0}; /* ended at out: even if never started */
  char extra[2048];
  if (entry == NULL || entry[0] == '\0') {
    printf("    skipped: node and npm are needed for the server-everything tests\n");
    return;
  }
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"ev\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"],"
                   "\"sampling\":true,\"sampling_max_tokens\":64,\"elicitation\":true}}",
                   entry);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  CHECK(start_turn(&turn, scenario("mcp-everything-sampling.json"), "sk-c", extra, "go") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int sampled = 0, elicited = 0, results = 0;
  bool done = false;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MCP_SAMPLING_REQUEST) {
      const PantoMcpSamplingRequest *r = &ev.payload.mcp_sampling_request;
      CHECK(str_eq(r->server, "ev"));
      CHECK(str_eq(r->summary, "Resource trigger-sampling-request context: name a colour"));
      CHECKF(r->max_tokens == 64, "%llu", (unsigned long long)r->max_tokens);
      CHECK(str_eq(r->outcome, "answered"));
      sampled++;
    } else if (ev.kind == PANTO_EV_MCP_ELICITATION_REQUEST) {
      const PantoMcpElicitationRequest *r = &ev.payload.mcp_elicitation_request;
      CHECK(str_eq(r->server, "ev"));
      CHECK(str_eq(r->message, "Please provide inputs for the following fields:"));
      CHECK(str_eq(r->outcome, "decline"));
      elicited++;
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      const PantoToolResult *r = &ev.payload.tool_result;
      CHECK(!r->is_error);
      if (str_eq(r->call_id, "call_s")) {
        CHECK(sampled == 1); /* the event came first */
        CHECKF(contains(r->output, "\"text\": \"teal\""), "%.*s", (int)r->output.len,
               r->output.ptr);
      } else {
        CHECK(str_eq(r->call_id, "call_e"));
        CHECK(elicited == 1);
        CHECK(contains(r->output, "User declined"));
      }
      results++;
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && results == 2) {
      CHECK(str_eq(ev.payload.message_complete.text, "done"));
      done = true;
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  CHECK(done && sampled == 1 && elicited == 1);
out:
  end_turn(&turn);
}

/* What the host's hooks answer, and what they saw. */
typedef struct ClientHost {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int approve;          /* approve_sampling's answer */
  const char *answer;   /* elicit's answer (NULL: 0, declined) */
  int approvals, elicits, frees;
  size_t caps[4];       /* the `cap` of each elicit call */
  bool sampling_json_ok, elicit_json_ok;
} ClientHost;

static ClientHost hooks_host = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL,
                                0, 0, 0, {0}, false, false};

static bool has(const char *json, size_t len, const char *want) {
  return json[len] == '\0' && strstr(json, want) != NULL;
}

static int approve_sampling(void *user_data, const char *request_json, size_t len) {
  ClientHost *h = user_data;
  pthread_mutex_lock(&h->mu);
  h->approvals++;
  h->sampling_json_ok =
      has(request_json, len, "\"server\":\"ev\"") && has(request_json, len, "\"max_tokens\":64") &&
      has(request_json, len, "\"system_prompt\":\"You are a helpful test server.\"") &&
      has(request_json, len,
          "\"messages\":[{\"role\":\"user\",\"text\":\"Resource trigger-sampling-request "
          "context: name a colour\"}]");
  int r = h->approve;
  pthread_mutex_unlock(&h->mu);
  return r;
}

static size_t elicit(void *user_data, const char *request_json, size_t len, char *buf,
                     size_t cap) {
  ClientHost *h = user_data;
  pthread_mutex_lock(&h->mu);
  if (h->elicits < 4) h->caps[h->elicits] = cap;
  h->elicits++;
  h->elicit_json_ok = has(request_json, len, "\"server\":\"ev\"") &&
                      has(request_json, len, "\"requested_schema\":{") &&
                      has(request_json, len, "\"required\":[\"name\"]");
  size_t n = h->answer == NULL ? 0 : strlen(h->answer);
  if (n > 0 && n <= cap) memcpy(buf, h->answer, n);
  pthread_mutex_unlock(&h->mu);
  return n;
}

static void free_hooks(void *user_data) {
  ClientHost *h = user_data;
  pthread_mutex_lock(&h->mu);
  h->frees++;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Waits (at most 60 s) until free_user_data was called once. */
static bool wait_freed(void) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 60;
  pthread_mutex_lock(&hooks_host.mu);
  while (hooks_host.frees < 1) {
    if (pthread_cond_timedwait(&hooks_host.cv, &hooks_host.mu, &deadline) == ETIMEDOUT) break;
  }
  bool done = hooks_host.frees >= 1;
  pthread_mutex_unlock(&hooks_host.mu);
  return done;
}

/* No "panto-mcp-hook" thread is left in this process: the library runs each hook on a
 * detached thread of its own, which ends once the hook returned; the test waits for
 * them (wait_until(no_thread_named, "panto-mcp-hook", ...)) so that none is alive at
 * exit. */

/* The accepted answer, padded with spaces to more than a page (any length up to `cap`
 * is taken). */
static char accepted[6000];

/* What one turn with the hooks showed. */
typedef struct HooksTurn {
  char sampled[32], elicited[32]; /* the events' outcomes */
  bool sampling_error, elicitation_error;
  char sampling_out[512], elicitation_out[512];
  char done[32];
  long model_requests;
} HooksTurn;

static void copy_str(char *dst, size_t cap, PantoStr s) {
  snprintf(dst, cap, "%.*s", (int)s.len, s.ptr);
}

/* One turn of `scenario_name` with the hooks lent to the agent (approve_sampling
 * answering `approve`, elicit `answer`), its results into *out. 0 on success. */
static int hooks_turn(const char *entry, const char *scenario_name, int approve,
                      const char *answer, HooksTurn *out) {
  Turn turn = {0};
  PantoError *err = NULL;
  char extra[2048];
  int rc = -1;
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"ev\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"],"
                   "\"sampling\":true,\"sampling_max_tokens\":64,\"elicitation\":true}}",
                   entry);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  pthread_mutex_lock(&hooks_host.mu);
  hooks_host.approve = approve;
  hooks_host.answer = answer;
  hooks_host.approvals = hooks_host.elicits = hooks_host.frees = 0;
  memset(hooks_host.caps, 0, sizeof hooks_host.caps);
  hooks_host.sampling_json_ok = hooks_host.elicit_json_ok = false;
  pthread_mutex_unlock(&hooks_host.mu);
  CHECK(start_agent(&turn, scenario(scenario_name), "sk-c", extra) == 0);
  PantoMcpClientHooks hooks = {approve_sampling, elicit, &hooks_host, free_hooks};
  CHECK(panto_agent_set_mcp_client_hooks(turn.agent, &hooks, &err) == PANTO_OK);
  turn.stream = start_stream(turn.agent, "go");
  CHECK(turn.stream != NULL);
  memset(out, 0, sizeof *out);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int results = 0;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MCP_SAMPLING_REQUEST) {
      CHECK(out->sampled[0] == '\0');
      copy_str(out->sampled, sizeof out->sampled, ev.payload.mcp_sampling_request.outcome);
    } else if (ev.kind == PANTO_EV_MCP_ELICITATION_REQUEST) {
      CHECK(out->elicited[0] == '\0');
      copy_str(out->elicited, sizeof out->elicited, ev.payload.mcp_elicitation_request.outcome);
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      const PantoToolResult *r = &ev.payload.tool_result;
      if (str_eq(r->call_id, "call_s")) {
        out->sampling_error = r->is_error;
        copy_str(out->sampling_out, sizeof out->sampling_out, r->output);
      } else {
        CHECK(str_eq(r->call_id, "call_e"));
        out->elicitation_error = r->is_error;
        copy_str(out->elicitation_out, sizeof out->elicitation_out, r->output);
      }
      /* Both calls are the same server's, and nothing on stdio says which call a
       * request of the server was made for: each event comes before the result of a
       * call still running when its request was answered, so both came before the
       * second result. */
      if (++results == 2) CHECK(out->sampled[0] != '\0' && out->elicited[0] != '\0');
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      copy_str(out->done, sizeof out->done, ev.payload.message_complete.text);
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  {
    char *requests = server_get(&turn.srv, "/_panto/requests");
    CHECK(requests != NULL);
    long count = 0;
    for (const char *p = requests; (p = strstr(p, "\"seq\":")) != NULL; p++) count++;
    free(requests);
    out->model_requests = count;
  }
  rc = 0;
out:
  if (err != NULL) panto_error_free(err);
  end_turn(&turn);
  return rc;
}

static void test_mcp_client_hooks_approve_and_accept(void) {
  const char *entry = getenv("PANTO_EVERYTHING");
  HooksTurn t;
  if (entry == NULL || entry[0] == '\0') {
    printf("    skipped: node and npm are needed for the server-everything tests\n");
    return;
  }
  const char *json = "{\"action\":\"accept\",\"content\":{\"name\":\"Ada Lovelace\",\"check\":true}}";
  memset(accepted, ' ', sizeof accepted - 1);
  memcpy(accepted, json, strlen(json));
  accepted[sizeof accepted - 1] = '\0';
  CHECK(hooks_turn(entry, "mcp-client-hooks-allow.json", 1, accepted, &t) == 0);
  CHECK(wait_freed());
  CHECK(wait_until(no_thread_named, (void *)"panto-mcp-hook", 60000));
  CHECKF(strcmp(t.sampled, "answered") == 0, "%s", t.sampled);
  CHECKF(!t.sampling_error && strstr(t.sampling_out, "\"text\": \"teal\"") != NULL, "%s",
         t.sampling_out);
  CHECKF(strcmp(t.elicited, "accept") == 0, "%s", t.elicited);
  CHECKF(!t.elicitation_error && strstr(t.elicitation_out, "- Name: Ada Lovelace") != NULL &&
             strstr(t.elicitation_out, "- Agreed to terms: true") != NULL,
         "%s", t.elicitation_out);
  CHECKF(strcmp(t.done, "done") == 0, "%s", t.done);
  CHECKF(t.model_requests == 3, "%ld", t.model_requests);
  pthread_mutex_lock(&hooks_host.mu);
  int approvals = hooks_host.approvals, elicits = hooks_host.elicits, frees = hooks_host.frees;
  size_t cap0 = hooks_host.caps[0], cap1 = hooks_host.caps[1];
  bool json_ok = hooks_host.sampling_json_ok && hooks_host.elicit_json_ok;
  pthread_mutex_unlock(&hooks_host.mu);
  CHECKF(approvals == 1 && elicits == 1 && frees == 1, "approvals %d elicits %d frees %d",
         approvals, elicits, frees);
  /* One call, with room for any answer: the person is asked once. */
  CHECKF(cap0 == (size_t)1 << 20 && cap1 == 0, "caps %zu %zu", cap0, cap1);
  CHECK(json_ok);
out:;
}

static void test_mcp_client_hooks_refuse_and_decline(void) {
  const char *entry = getenv("PANTO_EVERYTHING");
  HooksTurn t;
  if (entry == NULL || entry[0] == '\0') {
    printf("    skipped: node and npm are needed for the server-everything tests\n");
    return;
  }
  /* An answer that is not an answer's JSON declines (never a crash or a hang). */
  CHECK(hooks_turn(entry, "mcp-client-hooks-deny.json", 0, "{\"action\": \"maybe\"", &t) == 0);
  CHECK(wait_freed());
  CHECK(wait_until(no_thread_named, (void *)"panto-mcp-hook", 60000));
  CHECKF(strcmp(t.sampled, "denied") == 0, "%s", t.sampled);
  CHECKF(t.sampling_error && strstr(t.sampling_out, "declined") != NULL, "%s", t.sampling_out);
  CHECKF(strcmp(t.elicited, "decline") == 0, "%s", t.elicited);
  CHECKF(!t.elicitation_error && strstr(t.elicitation_out, "User declined") != NULL, "%s",
         t.elicitation_out);
  CHECKF(strcmp(t.done, "done") == 0, "%s", t.done);
  /* No model request for the refused sampling: the tool calls, then "done". */
  CHECKF(t.model_requests == 2, "%ld", t.model_requests);
  pthread_mutex_lock(&hooks_host.mu);
  int approvals = hooks_host.approvals, elicits = hooks_host.elicits, frees = hooks_host.frees;
  pthread_mutex_unlock(&hooks_host.mu);
  CHECKF(approvals == 1 && elicits == 1 && frees == 1, "approvals %d elicits %d frees %d",
         approvals, elicits, frees);

  /* Without MCP servers: a config error, and user_data stays the caller's. */
  {
    TestServer srv = {0};
    PantoError *err = NULL;
    CHECK(server_start(&srv, scenario("mcp-client-hooks-deny.json")) == 0);
    PantoAgent *plain = new_agent(&srv, "sk-c", "");
    PantoStatus st = PANTO_OK;
    if (plain != NULL) {
      PantoMcpClientHooks hooks = {approve_sampling, elicit, &hooks_host, free_hooks};
      st = panto_agent_set_mcp_client_hooks(plain, &hooks, &err);
    }
    bool config = err != NULL && panto_error_kind(err) == PANTO_ERR_CONFIG;
    if (err != NULL) panto_error_free(err);
    panto_agent_free(plain);
    server_stop(&srv);
    CHECK(plain != NULL && st == PANTO_ERROR && config);
    pthread_mutex_lock(&hooks_host.mu);
    frees = hooks_host.frees;
    pthread_mutex_unlock(&hooks_host.mu);
    CHECK(frees == 1);
  }
out:;
}

static const TestCase TESTS[] = {
    {"mcp_sampling_and_elicitation_events", test_mcp_sampling_and_elicitation_events},
    {"mcp_client_hooks_approve_and_accept", test_mcp_client_hooks_approve_and_accept},
    {"mcp_client_hooks_refuse_and_decline", test_mcp_client_hooks_refuse_and_decline},
};
const TestSuite MCP_SAMPLING_TESTS = {"test_mcp_sampling.c", TESTS, sizeof TESTS / sizeof TESTS[0]};

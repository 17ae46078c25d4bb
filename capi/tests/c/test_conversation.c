/* C tests of the conversation an agent keeps: reasoning control and prompt caching with
 * the transcript, compaction (manual, automatic, and cancelled from another thread
 * through a cancel token). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

/* Reasoning control (config and per turn), prompt caching and the transcript, against
 * conversation-reasoning-caching.json: the server only answers requests that carry the
 * high-effort thinking budget and the cache breakpoints. */
static void test_reasoning_caching_transcript(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoString transcript = {NULL, 0};
  PantoError *err = NULL;
  CHECK(server_start(&srv, shared_scenario("conversation-reasoning-caching.json")) == 0);
  char cfg[2048];
  snprintf(cfg, sizeof cfg,
           "{\"provider\":\"anthropic\",\"model\":\"claude-x\",\"base_url\":\"%s\","
           "\"api_key\":\"sk-c\",\"system\":\"You are terse.\","
           "\"reasoning\":{\"effort\":\"low\"},\"retry\":{\"max_retries\":0},"
           "\"tools\":[{\"name\":\"weather\",\"parameters\":{\"type\":\"object\"}}]}",
           srv.url);
  CHECK(panto_agent_new(cfg, strlen(cfg), &agent, &err) == PANTO_OK);
  /* A per-turn option the library does not know is a config error naming it. */
  const char *bad = "{\"reasoning\":{\"effort\":\"max\"}}";
  CHECK(panto_agent_stream_with(agent, "x", 1, bad, strlen(bad), &stream, &err) == PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "options.reasoning.effort"));
  panto_error_free(err);
  err = NULL;
  const char *opts = "{\"reasoning\":{\"effort\":\"high\"}}";
  const char *input = "Weather in Paris?";
  CHECK(panto_agent_stream_with(agent, input, strlen(input), opts, strlen(opts), &stream,
                                &err) == PANTO_OK);
  PantoUsage usage = {0};
  PantoStatus st = drain(stream, &usage);
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECKF(usage.cache_read_tokens == 1500, "cache_read_tokens %llu",
         (unsigned long long)usage.cache_read_tokens);
  panto_stream_free(stream);
  stream = NULL;
  CHECK(panto_agent_transcript_json(agent, &transcript, &err) == PANTO_OK);
  CHECK(transcript.ptr != NULL && transcript.ptr[transcript.len] == 0);
  CHECKF(strstr(transcript.ptr, "{\"role\":\"assistant\",\"kind\":\"reasoning\","
                                "\"text\":\"I should look up the weather.\"}") != NULL &&
             strstr(transcript.ptr, "\"kind\":\"tool_result\",\"text\":\"sunny\"") != NULL,
         "%s", transcript.ptr);
out:
  panto_string_free(&transcript);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_error_free(err);
  server_stop(&srv);
}

/* Manual compaction between two turns, then automatic
 * compaction announced by PANTO_EV_HISTORY_COMPACTED (conversation-compaction.json). */
static void test_compaction(void) {
  Turn manual, automatic = {0}; /* automatic is ended at out: even if never started */
  PantoString result = {NULL, 0};
  PantoError *err = NULL;
  CHECK(start_turn(&manual, shared_scenario("conversation-compaction.json"), "sk-c",
                   ",\"retry\":{\"max_retries\":0}", "What is the capital of France?") == 0);
  CHECK(manual.stream != NULL && drain(manual.stream, NULL) == PANTO_DONE);
  panto_stream_free(manual.stream);
  manual.stream = NULL;
  const char *opts = "{\"keep_last\":1}";
  CHECK(panto_agent_compact(manual.agent, opts, strlen(opts), NULL, &result, &err) == PANTO_OK);
  {
    const char *want = "{\"changed\":true,\"messages_before\":2,\"messages_after\":2,"
                       "\"tokens_before\":108,\"tokens_after\":";
    CHECKF(result.ptr != NULL && strncmp(result.ptr, want, strlen(want)) == 0, "%s", result.ptr);
  }
  panto_string_free(&result);
  /* A bad option is a config error, and nothing is sent. */
  const char *bad = "{\"keep_last\":0}";
  CHECK(panto_agent_compact(manual.agent, bad, strlen(bad), NULL, &result, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && result.ptr == NULL);
  panto_error_free(err);
  err = NULL;
  manual.stream = start_stream(manual.agent, "And its population?");
  CHECK(manual.stream != NULL);
  CHECK(drain(manual.stream, NULL) == PANTO_DONE);
  panto_stream_free(manual.stream);
  manual.stream = NULL;

  CHECK(start_turn(&automatic, shared_scenario("conversation-compaction.json"), "sk-c",
                   ",\"compaction\":{\"threshold_tokens\":50,\"keep_last\":1}",
                   "What is the capital of France?") == 0);
  CHECK(automatic.stream != NULL && drain(automatic.stream, NULL) == PANTO_DONE);
  panto_stream_free(automatic.stream);
  automatic.stream = start_stream(automatic.agent, "And its population?");
  CHECK(automatic.stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(automatic.stream, &ev) == PANTO_EVENT);
  CHECKF(ev.kind == PANTO_EV_HISTORY_COMPACTED, "kind %u", ev.kind);
  CHECK(ev.payload.history_compacted.messages_before == 3);
  CHECK(ev.payload.history_compacted.messages_after == 3);
  CHECK(ev.payload.history_compacted.tokens_before >= 108);
  CHECK(str_eq(panto_event_kind_name(ev.kind), "history_compacted"));
  PantoStr json;
  CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
  CHECK(strncmp(json.ptr, "{\"type\":\"history_compacted\",\"messages_before\":3,", 48) == 0);
  CHECK(drain(automatic.stream, NULL) == PANTO_DONE);
out:
  panto_string_free(&result);
  panto_error_free(err);
  end_turn(&automatic);
  end_turn(&manual);
}

/* A thread blocked in panto_agent_compact. */
typedef struct Compactor {
  PantoAgent *agent;
  const PantoCancelToken *cancel;
  _Atomic pid_t tid;
  atomic_bool finished;
  PantoStatus status;
  uint32_t error_kind;
  PantoString result;
} Compactor;

static void *compact_on_thread(void *arg) {
  Compactor *c = arg;
  atomic_store(&c->tid, current_tid());
  PantoError *err = NULL;
  const char *opts = "{\"keep_last\":1}";
  c->status = panto_agent_compact(c->agent, opts, strlen(opts), c->cancel, &c->result, &err);
  c->error_kind = panto_error_kind(err);
  panto_error_free(err);
  atomic_store(&c->finished, true);
  return NULL;
}

/* The compacting thread is asleep inside panto_agent_compact (the kernel says so). */
static bool compactor_blocked(void *arg) {
  Compactor *c = arg;
  pid_t tid = atomic_load(&c->tid);
  return tid != 0 && !atomic_load(&c->finished) && thread_state(tid) == 'S';
}

static bool compactor_finished(void *arg) { return atomic_load(&((Compactor *)arg)->finished); }

static const char CANCEL_HISTORY[] =
    "{\"version\":1,\"messages\":["
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"two\"}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}]}";

/* A compaction blocked on the provider (the server holds the summary's response) is
 * cancelled through its token from another thread: CANCELLED, the history untouched,
 * the connection closed. A token already cancelled fails at once and sends nothing. */
static void test_cancel_compaction(void) {
  Turn turn;
  PantoCancelToken *token = NULL;
  PantoString before = {NULL, 0}, after = {NULL, 0}, result = {NULL, 0};
  PantoError *err = NULL;
  pthread_t th;
  bool joined = true;
  Compactor c;
  memset(&c, 0, sizeof c);
  CHECK(start_agent(&turn, scenario("text-held.json"), "sk-test",
                    ",\"retry\":{\"max_retries\":0}") == 0);
  CHECK(panto_agent_load_history(turn.agent, CANCEL_HISTORY, strlen(CANCEL_HISTORY), &err) ==
        PANTO_OK);
  CHECK(panto_agent_save_history(turn.agent, &before, &err) == PANTO_OK);
  token = panto_cancel_token_new();
  CHECK(token != NULL && !panto_cancel_token_is_cancelled(token));
  c.agent = turn.agent;
  c.cancel = token;
  CHECK(pthread_create(&th, NULL, compact_on_thread, &c) == 0);
  joined = false;
  /* The summary request waits at the server's gate, its caller asleep in the library. */
  StatWait held = {&turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(compactor_blocked, &c, 30000));
  /* The agent is taken while it compacts. */
  CHECK(panto_agent_stream(turn.agent, "x", 1, &turn.stream, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_BUSY);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  CHECK(panto_cancel_token_is_cancelled(token));
  CHECK(wait_until(compactor_finished, &c, 30000));
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECKF(c.status == PANTO_ERROR && c.error_kind == PANTO_ERR_CANCELLED, "status %d kind %u",
         c.status, c.error_kind);
  CHECK(c.result.ptr == NULL);
  CHECK(panto_agent_save_history(turn.agent, &after, &err) == PANTO_OK);
  CHECKF(after.len == before.len && memcmp(after.ptr, before.ptr, before.len) == 0, "%s",
         after.ptr);
  CHECK(wait_until(no_client_connection, &turn.srv, 30000));
  /* Idempotent. A cancelled token stays cancelled: the next call fails at once and
   * sends nothing (the only new connection is the stats request itself). */
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  long total = server_stat(&turn.srv, "connections_total");
  CHECK(total > 0);
  CHECK(panto_agent_compact(turn.agent, NULL, 0, token, &result, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CANCELLED && result.ptr == NULL);
  CHECK(server_stat(&turn.srv, "connections_total") == total + 1);
  /* NULL is refused, not a crash. */
  CHECK(panto_cancel_token_cancel(NULL) == PANTO_ERROR);
  CHECK(!panto_cancel_token_is_cancelled(NULL));
  panto_cancel_token_free(NULL);
out:
  if (!joined) {
    /* Whether or not the cancel worked, the opened gate lets the call return. */
    panto_cancel_token_cancel(token);
    server_open_gate(&turn.srv);
    pthread_join(th, NULL);
  }
  panto_string_free(&c.result);
  panto_string_free(&before);
  panto_string_free(&after);
  panto_string_free(&result);
  panto_cancel_token_free(token);
  panto_error_free(err);
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"reasoning_caching_transcript", test_reasoning_caching_transcript},
    {"compaction", test_compaction},
    {"cancel_compaction", test_cancel_compaction},
};
const TestSuite CONVERSATION_TESTS = {"test_conversation.c", TESTS,
                                      sizeof TESTS / sizeof TESTS[0]};

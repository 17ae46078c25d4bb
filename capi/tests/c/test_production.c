/* Production controls through the C ABI: panto_agent_count_tokens (the provider's count
 * endpoint, the estimate), and message_start.queued_ms under max_concurrent_requests. */
#include <string.h>

#include "harness.h"

#define KEY "sk-production"

static PantoAgent *agent_from(const char *cfg) {
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

static void test_count_tokens_provider_and_estimate(void) {
  TestServer srv = {0};
  PantoAgent *anthropic = NULL, *openai = NULL;
  PantoString out = {0};
  PantoError *err = NULL;
  CHECK(server_start(&srv, scenario("count-tokens.json")) == 0);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"provider\":\"anthropic\",\"model\":\"claude-test\",\"base_url\":\"%s\","
           "\"api_key\":\"%s\"}",
           srv.url, KEY);
  anthropic = agent_from(cfg);
  CHECK(anthropic != NULL);
  const char *input = "How long is this?";
  CHECK(panto_agent_count_tokens(anthropic, input, strlen(input), &out, &err) == PANTO_OK);
  CHECKF(out.len == strlen("{\"tokens\":42,\"estimated\":false}") &&
             memcmp(out.ptr, "{\"tokens\":42,\"estimated\":false}", out.len) == 0,
         "%.*s", (int)out.len, out.ptr);
  panto_string_free(&out);

  /* Chat Completions has no count endpoint: an estimate, and nothing is sent. */
  openai = new_agent(&srv, KEY, NULL);
  CHECK(openai != NULL);
  CHECK(panto_agent_count_tokens(openai, input, strlen(input), &out, &err) == PANTO_OK);
  CHECKF(out.len > 17 && memcmp(out.ptr + out.len - 17, "\"estimated\":true}", 17) == 0,
         "%.*s", (int)out.len, out.ptr);
  panto_string_free(&out);
  /* NULL with length 0 is the empty input; NULL with a length is an error. */
  CHECK(panto_agent_count_tokens(openai, NULL, 0, &out, &err) == PANTO_OK);
  panto_string_free(&out);
  CHECK(panto_agent_count_tokens(openai, NULL, 3, &out, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_agent_count_tokens(NULL, input, strlen(input), &out, &err) == PANTO_ERROR);
  panto_error_free(err);
  err = NULL;
out:
  panto_string_free(&out);
  panto_error_free(err);
  panto_agent_free(anthropic);
  panto_agent_free(openai);
  server_stop(&srv);
}

static void test_message_start_queued_ms(void) {
  Turn turn;
  PantoEvent ev = PANTO_EVENT_INIT;
  bool seen = false;
  CHECK(start_turn(&turn, scenario("text.json"), KEY,
                   ",\"max_concurrent_requests\":2,\"max_queued_requests\":4", "hi") == 0);
  PantoStatus st;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MESSAGE_START) {
      /* Alone under its bound: it did not wait. */
      CHECK(ev.payload.message_start.queued_ms == 0);
      seen = true;
    }
  }
  CHECK(st == PANTO_DONE);
  CHECK(seen);
out:
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"count_tokens_provider_and_estimate", test_count_tokens_provider_and_estimate},
    {"message_start_queued_ms", test_message_start_queued_ms},
};
const TestSuite PRODUCTION_TESTS = {"test_production.c", TESTS, sizeof TESTS / sizeof TESTS[0]};

/* panto's own OpenTelemetry export through the C ABI (ABI 1.3): panto_telemetry_export
 * opts in, configured by the OTEL_EXPORTER_OTLP_* variables; a turn's spans and metrics
 * reach the test server's OTLP/HTTP receiver (it decodes the protobuf with
 * opentelemetry-proto), the spans under the span the turn option "traceparent" names;
 * panto_telemetry_flush waits for them. The export's thread is detached: nothing is left
 * to join at exit (ThreadSanitizer). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KEY "sk-c-otel-SECRET-5521"
#define TOKEN "collector-c-SECRET-8813"
#define TRACE_ID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PARENT_ID "00f067aa0ba902b7"
#define WEATHER_TOOL                                                                   \
  ",\"tools\":[{\"name\":\"weather\",\"description\":\"Weather of a city\","          \
  "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}]"

/* The `nth` line (0-based) of `spans` (one JSON object a line, keys sorted) whose span is
 * named `name`, copied into `line`. */
static bool span_line(const char *spans, const char *name, int nth, char *line, size_t cap) {
  char needle[128];
  snprintf(needle, sizeof needle, ",\"name\":\"%s\",", name);
  for (const char *p = spans; (p = strstr(p, needle)) != NULL; p++) {
    const char *start = p;
    while (start > spans && start[-1] != '\n') start--;
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    /* The span's own name follows its events and headers: the last match on the line. */
    const char *later = strstr(p + 1, needle);
    if (later && later < end) continue;
    if (nth-- > 0) continue;
    snprintf(line, cap, "%.*s", (int)(end - start), start);
    return true;
  }
  return false;
}

/* How many spans named `name` there are. */
static int span_count(const char *spans, const char *name) {
  char line[16384];
  int n = 0;
  while (span_line(spans, name, n, line, sizeof line)) n++;
  return n;
}

/* The string `"key":"…"` of `line` (the first, preceded by ',' or '{') into `out`. */
static bool field(const char *line, const char *key, char *out, size_t cap) {
  char needle[128];
  for (int lead = 0; lead < 2; lead++) {
    snprintf(needle, sizeof needle, "%c\"%s\":\"", lead ? '{' : ',', key);
    const char *p = strstr(line, needle);
    if (!p) continue;
    p += strlen(needle);
    const char *end = strchr(p, '"');
    if (!end) return false;
    snprintf(out, cap, "%.*s", (int)(end - p), p);
    return true;
  }
  return false;
}

/* `line`'s string `key` equals `want`. */
static bool field_is(const char *line, const char *key, const char *want) {
  char got[256];
  return field(line, key, got, sizeof got) && strcmp(got, want) == 0;
}

/* The line of `metrics` (one data point a line, keys sorted) of metric `name` holding
 * every one of `needles` (NULL-terminated) and not `absent` (NULL: anything), copied into
 * `line`. */
static bool metric_line(const char *metrics, const char *name, const char *const *needles,
                        const char *absent, char *line, size_t cap) {
  char want[128];
  snprintf(want, sizeof want, ",\"name\":\"%s\",", name);
  for (const char *p = metrics; p && *p;) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    snprintf(line, cap, "%.*s", (int)(end - p), p);
    bool all = strstr(line, want) != NULL && !(absent && strstr(line, absent));
    for (const char *const *n = needles; all && *n; n++) all = strstr(line, *n) != NULL;
    if (all) return true;
    p = *end ? end + 1 : end;
  }
  return false;
}

/* The number after `"key":` in `line` (-1 when absent). */
static double number(const char *line, const char *key) {
  char needle[128];
  snprintf(needle, sizeof needle, "\"%s\":", key);
  const char *p = strstr(line, needle);
  return p ? strtod(p + strlen(needle), NULL) : -1;
}

static PantoStream *stream_with(PantoAgent *agent, const char *input, const char *options,
                                PantoError **err) {
  PantoStream *stream = NULL;
  if (panto_agent_stream_with(agent, input, strlen(input), options, strlen(options), &stream,
                              err) != PANTO_OK)
    return NULL;
  return stream;
}

static void test_telemetry_export_of_a_tool_turn(void) {
  TestServer srv = {0}, failing = {0};
  PantoAgent *agent = NULL, *agent2 = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  char *spans = NULL, *metrics = NULL;
  PantoUsage usage = {0};
  bool exporting = true;
  uint64_t undelivered = 99;
  static char line[16384], agent_id[64];

  /* Not opted in: a flush has nothing to wait for. */
  CHECK(panto_telemetry_flush(1000, &undelivered, &err) == PANTO_OK && err == NULL);
  CHECK(undelivered == 0);

  CHECK(server_start(&srv, demo_scenario) == 0);
  CHECK(server_start(&failing, scenario("unauthorized.json")) == 0);
  /* Set before the export starts, which reads them once. */
  char endpoint[128];
  snprintf(endpoint, sizeof endpoint, "%s/_panto/otlp", srv.url);
  CHECK(setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, 1) == 0);
  CHECK(setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20" TOKEN, 1) == 0);
  CHECK(unsetenv("OTEL_SERVICE_NAME") == 0 && unsetenv("OTEL_RESOURCE_ATTRIBUTES") == 0);
  CHECK(unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == 0);
  CHECK(unsetenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") == 0);
  CHECK(unsetenv("OTEL_TRACES_EXPORTER") == 0 && unsetenv("OTEL_METRICS_EXPORTER") == 0);
  CHECK(unsetenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") == 0);
  CHECK(panto_telemetry_export("c-host", strlen("c-host"), &exporting, &err) == PANTO_OK);
  CHECK(exporting && err == NULL);
  /* Again: it is running. */
  exporting = false;
  CHECK(panto_telemetry_export(NULL, 0, &exporting, &err) == PANTO_OK && exporting);

  agent = new_agent(&srv, KEY, WEATHER_TOOL);
  CHECK(agent != NULL);
  /* A traceparent that is not one is refused, naming the option. */
  CHECK(stream_with(agent, "hi", "{\"traceparent\":\"00-abc-01\"}", &err) == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "options.traceparent"));
  panto_error_free(err);
  err = NULL;

  const char *options = "{\"traceparent\":\"00-" TRACE_ID "-" PARENT_ID "-01\"}";
  stream = stream_with(agent, "What's the weather in Paris?", options, &err);
  CHECK(stream != NULL);
  CHECK(drain(stream, &usage) == PANTO_DONE);
  CHECK(usage.reported && usage.input_tokens > 0 && usage.output_tokens > 0);
  panto_stream_free(stream);
  stream = NULL;
  /* A failed turn, to another provider; no traceparent. */
  agent2 = new_agent(&failing, KEY, NULL);
  CHECK(agent2 != NULL);
  stream = stream_with(agent2, "hi", "{}", &err);
  CHECK(stream != NULL);
  CHECK(drain(stream, NULL) == PANTO_ERROR);
  panto_stream_free(stream);
  stream = NULL;

  CHECK(panto_telemetry_flush(20000, &undelivered, &err) == PANTO_OK && err == NULL);
  CHECK(undelivered == 0);
  spans = server_get(&srv, "/_panto/otlp/spans");
  CHECK(spans != NULL);
  CHECKF(strstr(spans, KEY) == NULL, "the API key in the spans: %s", spans);

  /* The tool turn: invoke_agent under TRACEPARENT's span, its requests and tool under it. */
  CHECKF(span_count(spans, "invoke_agent") == 2, "%s", spans);
  bool found = false;
  for (int i = 0; i < 2 && !found; i++) {
    CHECK(span_line(spans, "invoke_agent", i, line, sizeof line));
    found = field_is(line, "trace_id", TRACE_ID);
  }
  CHECKF(found, "%s", spans);
  CHECKF(field_is(line, "parent_span_id", PARENT_ID), "%s", line);
  CHECK(field(line, "span_id", agent_id, sizeof agent_id) && strlen(agent_id) == 16);
  CHECK(field_is(line, "gen_ai.operation.name", "invoke_agent"));
  CHECK(field_is(line, "gen_ai.provider.name", "openai"));
  CHECK(field_is(line, "gen_ai.request.model", "gpt-4o-mini"));
  CHECK(field_is(line, "gen_ai.response.model", "gpt-4o-2024-08-06"));
  CHECK(field_is(line, "service.name", "c-host"));
  CHECK(strstr(line, "\"kind\":1,") != NULL); /* internal */
  CHECK(field_is(line, "authorization", "Bearer " TOKEN)); /* the export's header */

  CHECKF(span_count(spans, "chat gpt-4o-mini") == 3, "two requests, one failed: %s", spans);
  int under_agent = 0;
  for (int i = 0; i < 3; i++) {
    CHECK(span_line(spans, "chat gpt-4o-mini", i, line, sizeof line));
    if (!field_is(line, "parent_span_id", agent_id)) continue;
    under_agent++;
    CHECK(field_is(line, "trace_id", TRACE_ID));
    CHECK(field_is(line, "gen_ai.operation.name", "chat"));
    CHECK(strstr(line, "\"kind\":3,") != NULL); /* client */
  }
  CHECK(under_agent == 2);
  CHECK(span_line(spans, "execute_tool weather", 0, line, sizeof line));
  CHECK(span_count(spans, "execute_tool weather") == 1);
  CHECK(field_is(line, "parent_span_id", agent_id));
  CHECK(field_is(line, "trace_id", TRACE_ID));
  CHECK(field_is(line, "gen_ai.tool.name", "weather"));
  CHECK(field_is(line, "gen_ai.tool.call.id", "call_1"));
  CHECK(field_is(line, "panto.tool.runner", "host"));
  CHECK(strstr(line, "gen_ai.tool.call.arguments") == NULL); /* content is off */

  /* The failed turn: a trace of its own, error.type and the error status. */
  found = false;
  for (int i = 0; i < 2 && !found; i++) {
    CHECK(span_line(spans, "invoke_agent", i, line, sizeof line));
    found = field_is(line, "error.type", "authentication");
  }
  CHECKF(found, "%s", spans);
  CHECK(field_is(line, "parent_span_id", ""));
  CHECK(!field_is(line, "trace_id", TRACE_ID));
  CHECK(strstr(line, "\"status\":{\"code\":2,") != NULL);

  /* The metrics, sent by the same flush: the conventions' histograms, their attributes,
   * units and buckets; the token counts are the tool turn's usage. */
  metrics = server_get(&srv, "/_panto/otlp/metrics");
  CHECK(metrics != NULL);
  CHECKF(strstr(metrics, KEY) == NULL, "the API key in the metrics: %s", metrics);
  const char *chat_attrs[] = {"\"gen_ai.operation.name\":\"chat\"",
                              "\"gen_ai.provider.name\":\"openai\"",
                              "\"gen_ai.request.model\":\"gpt-4o-mini\"",
                              "\"gen_ai.response.model\":\"gpt-4o-2024-08-06\"",
                              "\"server.address\":\"127.0.0.1\"",
                              NULL};
  const char *kinds[] = {"input", "output"};
  uint64_t want[] = {usage.input_tokens, usage.output_tokens};
  for (int i = 0; i < 2; i++) {
    char kind[64];
    snprintf(kind, sizeof kind, "\"gen_ai.token.type\":\"%s\"", kinds[i]);
    const char *needles[] = {kind, chat_attrs[0], chat_attrs[1], chat_attrs[2], chat_attrs[3],
                             chat_attrs[4], "\"unit\":\"{token}\"", "\"type\":\"histogram\"",
                             "\"explicit_bounds\":[1.0,4.0,16.0,64.0,256.0,", "\"c-host\"",
                             NULL};
    CHECKF(metric_line(metrics, "gen_ai.client.token.usage", needles, NULL, line, sizeof line),
           "%s tokens: %s", kinds[i], metrics);
    CHECKF(number(line, "count") == 2, "one record per request: %s", line);
    CHECKF(number(line, "sum") == (double)want[i], "the turn's %s tokens (%llu): %s", kinds[i],
           (unsigned long long)want[i], line);
  }
  const char *chat_ok[] = {chat_attrs[0], chat_attrs[1], chat_attrs[2], chat_attrs[3],
                           chat_attrs[4], "\"unit\":\"s\"",
                           "\"explicit_bounds\":[0.01,0.02,0.04,0.08,", NULL};
  /* The successful requests' point: the one without error.type. */
  CHECKF(metric_line(metrics, "gen_ai.client.operation.duration", chat_ok, "error.type", line,
                     sizeof line),
         "%s", metrics);
  CHECKF(number(line, "count") == 2, "two requests: %s", line);
  const char *chat_failed[] = {chat_attrs[0], "\"error.type\":\"authentication\"", NULL};
  CHECKF(metric_line(metrics, "gen_ai.client.operation.duration", chat_failed, NULL, line,
                     sizeof line),
         "the failed request's duration: %s", metrics);
  CHECK(number(line, "count") == 1);
  const char *tool[] = {"\"gen_ai.operation.name\":\"execute_tool\"", NULL};
  CHECKF(metric_line(metrics, "gen_ai.client.operation.duration", tool, NULL, line, sizeof line),
         "%s", metrics);
  CHECK(number(line, "count") == 1);
  const char *ttfc[] = {chat_attrs[0], chat_attrs[2], "\"unit\":\"s\"", NULL};
  CHECKF(metric_line(metrics, "gen_ai.client.operation.time_to_first_chunk", ttfc, NULL, line,
                     sizeof line),
         "%s", metrics);
  CHECKF(number(line, "count") == 2, "the two streamed answers: %s", line);
out:
  free(spans);
  free(metrics);
  panto_stream_free(stream);
  panto_error_free(err);
  panto_agent_free(agent);
  panto_agent_free(agent2);
  server_stop(&srv);
  server_stop(&failing);
  unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
}

static const TestCase TESTS[] = {
    {"telemetry_export_of_a_tool_turn", test_telemetry_export_of_a_tool_turn},
};
const TestSuite TELEMETRY_TESTS = {"test_telemetry.c", TESTS, sizeof TESTS / sizeof TESTS[0]};

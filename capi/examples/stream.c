/*
 * stream.c — one panto turn from C: prints every event as its canonical JSON line (the
 * same bytes `panto run --json` prints) and answers the host tool `weather`.
 *
 *   stream BASE_URL [PROMPT]
 *
 * BASE_URL is an OpenAI-compatible endpoint including its version, e.g.
 * https://api.openai.com/v1 or http://localhost:11434/v1 (Ollama). The API key comes
 * from $OPENAI_API_KEY, the model from $PANTO_MODEL (default gpt-4o-mini).
 *
 * Build (after scripts/install-capi.sh PREFIX, with PREFIX/lib/pkgconfig on
 * PKG_CONFIG_PATH):
 *   cc -std=c11 -o stream stream.c $(pkg-config --cflags --libs panto)
 *
 * Exit status: 0 when the turn completed, 1 when it failed (the last line is then the
 * error's JSON), 2 for bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panto.h"

/* The host tool. A real program would look the weather up; this one answers from a
 * table of one city, which is enough to show the protocol. */
static const char *weather(PantoStr arguments, int *is_error) {
  *is_error = 0;
  if (arguments.ptr != NULL && strstr(arguments.ptr, "\"Paris\"") != NULL)
    return "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}";
  *is_error = 1;
  return "unknown city";
}

/* Appends `s` to `out` as the contents of a JSON string. */
static void json_escape(char *out, size_t cap, const char *s) {
  size_t n = strlen(out);
  for (; *s && n + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)c;
    } else if (c < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
    } else {
      out[n++] = (char)c;
    }
  }
  out[n] = 0;
}

static void print_error(const char *what, PantoError *err) {
  PantoStr m = panto_error_message(err);
  fprintf(stderr, "%s: %.*s\n", what, (int)m.len, m.ptr);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s BASE_URL [PROMPT]\n", argv[0]);
    return 2;
  }
  const char *prompt = argc == 3 ? argv[2] : "What's the weather in Paris?";
  const char *model = getenv("PANTO_MODEL") ? getenv("PANTO_MODEL") : "gpt-4o-mini";

  /* Refuse a library of another ABI major than this program was built for. */
  if ((panto_abi_version() >> 16) != PANTO_ABI_VERSION_MAJOR) {
    fprintf(stderr, "libpanto ABI %u, built for %d\n", panto_abi_version() >> 16,
            PANTO_ABI_VERSION_MAJOR);
    return 1;
  }

  /* The configuration is JSON; the tools listed are host tools, answered below. */
  char config[4096] = "{\"provider\":\"openai\",\"model\":\"";
  json_escape(config, sizeof config, model);
  strcat(config, "\",\"base_url\":\"");
  json_escape(config, sizeof config, argv[1]);
  strcat(config,
         "\",\"tools\":[{\"name\":\"weather\",\"description\":\"Current weather of a city\","
         "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
         "\"required\":[\"city\"]}}]}");

  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  if (panto_agent_new(config, strlen(config), &agent, &err) != PANTO_OK) {
    print_error("configuration", err);
    panto_error_free(err);
    return 1;
  }
  if (panto_agent_stream(agent, prompt, strlen(prompt), &stream, &err) != PANTO_OK) {
    print_error("stream", err);
    panto_error_free(err);
    panto_agent_free(agent);
    return 1;
  }

  /* The pull loop: one event per call until PANTO_DONE or PANTO_ERROR. The event's
   * strings are valid until the next call, so everything is used right here. */
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus status;
  for (;;) {
    status = panto_next_event(stream, &ev);
    if (status == PANTO_DONE) break;
    if (status != PANTO_EVENT && status != PANTO_ERROR) status = PANTO_ERROR; /* unknown */
    PantoStr json;
    if (panto_event_to_json(&ev, &json) == PANTO_OK) {
      fwrite(json.ptr, 1, json.len, stdout);
      fputc('\n', stdout);
      fflush(stdout);
    }
    if (status == PANTO_ERROR) break;
    if (ev.kind == PANTO_EV_TOOL_CALL_START && ev.payload.tool_call_start.host) {
      PantoToolCallStart *call = &ev.payload.tool_call_start;
      int is_error = 1;
      const char *output = "no such tool";
      if (call->name.len == 7 && memcmp(call->name.ptr, "weather", 7) == 0)
        output = weather(call->arguments, &is_error);
      if (panto_stream_submit_tool_result(stream, call->call_id.ptr, call->call_id.len, output,
                                          strlen(output), is_error != 0, &err) != PANTO_OK) {
        print_error("tool result", err);
        panto_error_free(err);
        err = NULL;
      }
    }
    /* Every other kind, including kinds newer than this program, is just printed. */
  }

  panto_stream_free(stream);
  panto_agent_free(agent);
  return status == PANTO_DONE ? 0 : 1;
}

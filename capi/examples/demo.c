/*
 * demo.c — the demo turn from C: the `weather` tool answered in C, the answer streamed
 * to the terminal. scripts/demo.sh --all runs it against panto-testserver.
 *
 *   demo BASE_URL      (an OpenAI-compatible endpoint with its /v1; key from $OPENAI_API_KEY)
 */
#include <panto.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"model\": \"gpt-4o-mini\", \"base_url\": \"%s\", \"tools\": [{\"name\": \"weather\","
           " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}]}",
           argc > 1 ? argv[1] : "https://api.openai.com/v1");
  const char *prompt = "What's the weather in Paris?";
  PantoAgent *agent;
  PantoStream *stream;
  PantoEvent ev = PANTO_EVENT_INIT;
  if (panto_agent_new(cfg, strlen(cfg), &agent, NULL) != PANTO_OK) return 1;
  if (panto_agent_stream(agent, prompt, strlen(prompt), &stream, NULL) != PANTO_OK) return 1;
  PantoStatus status;
  while ((status = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_CONTENT_DELTA && ev.payload.content_delta.kind == PANTO_DELTA_TEXT) {
      PantoStr t = ev.payload.content_delta.text;
      printf("%.*s", (int)t.len, t.ptr);
      fflush(stdout);
    } else if (ev.kind == PANTO_EV_TOOL_CALL_START && ev.payload.tool_call_start.host) {
      PantoToolCallStart *call = &ev.payload.tool_call_start;
      const char *out = "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}";
      printf("→ %.*s(%.*s)\n", (int)call->name.len, call->name.ptr, (int)call->arguments.len,
             call->arguments.ptr);
      panto_stream_submit_tool_result(stream, call->call_id.ptr, call->call_id.len, out,
                                      strlen(out), false, NULL);
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      PantoStr o = ev.payload.tool_result.output;
      printf("← %.*s\n", (int)o.len, o.ptr);
    }
  }
  printf("\n");
  if (status == PANTO_ERROR) {
    PantoStr m = ev.payload.error.message;
    fprintf(stderr, "error: %.*s\n", (int)m.len, m.ptr);
  }
  panto_stream_free(stream);
  panto_agent_free(agent);
  return status == PANTO_DONE ? 0 : 1;
}

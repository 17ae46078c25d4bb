/* C tests of images and documents: a turn's input as text and images (the "input"
 * option), a host tool answered with text and an image, and the files a "path" part
 * must refuse without reading them whole (a FIFO, /dev/zero, a 64 GiB sparse file). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

/* Files a "path" part must not read whole: a FIFO with no writer (an ordinary open
 * blocks forever), /dev/zero (endless), and a sparse PNG of 64 GiB apparent size. Made
 * in a fresh directory `dir` (mkdtemp template); `paths` gets the three paths. */
static int make_hostile_files(char *dir, char paths[3][128]) {
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(paths[0], 128, "%s/pipe.png", dir);
  snprintf(paths[1], 128, "/dev/zero");
  snprintf(paths[2], 128, "%s/sparse.png", dir);
  if (mkfifo(paths[0], 0600) != 0) return -1;
  FILE *f = fopen(paths[2], "wb");
  if (f == NULL) return -1;
  fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
  fclose(f);
  return truncate(paths[2], (off_t)64 << 30);
}

static void remove_hostile_files(const char *dir, char paths[3][128]) {
  unlink(paths[0]);
  unlink(paths[2]);
  rmdir(dir);
}

/* What each hostile file's error says (after its path). */
static const char *const HOSTILE_WHY[3] = {
    "not a regular file (a FIFO)",
    "not a regular file (a character device)",
    "more than max_message_bytes",
};

/* A turn's input as text and images: the JSON input form of panto_agent_stream_with
 * (options "input"), against attachments-openai.json, whose server answers only a
 * request carrying the three parts in order. The transcript describes the image, not
 * its bytes; the input's mistakes are config errors before anything is sent. */
static void test_input_parts(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  PantoString transcript = {NULL, 0};
  CHECK(server_start(&srv, shared_scenario("attachments-openai.json")) == 0);
  agent = new_agent(&srv, "sk-c", ",\"retry\":{\"max_retries\":0}");
  CHECK(agent != NULL);
  /* Text and "input" together, an unreadable file: config errors, nothing sent. */
  const char *both = "{\"input\":[\"x\"]}";
  CHECK(panto_agent_stream_with(agent, "x", 1, both, strlen(both), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  const char *missing = "{\"input\":[{\"type\":\"image\",\"path\":\"/no/such/cat.png\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, missing, strlen(missing), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err), "/no/such/cat.png"), "%s",
         panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  /* A FIFO, /dev/zero and a 64 GiB sparse file: config errors naming the path, at
   * once — the FIFO's open does not block, no file is read past max_message_bytes (an
   * alarm ends the test instead of a hang or a read until memory runs out). */
  {
    char dir[] = "/tmp/panto-c-files-XXXXXX";
    char paths[3][128];
    CHECK(make_hostile_files(dir, paths) == 0);
    for (int i = 0; i < 3; i++) {
      char opts[512];
      snprintf(opts, sizeof opts, "{\"input\":[{\"type\":\"image\",\"path\":\"%s\"}]}",
               paths[i]);
      alarm(120);
      PantoStatus hostile = panto_agent_stream_with(agent, "", 0, opts, strlen(opts), &stream, &err);
      alarm(0);
      CHECK(hostile == PANTO_ERROR && stream == NULL);
      CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
      CHECKF(str_contains(panto_error_message(err), paths[i]) &&
                 str_contains(panto_error_message(err), HOSTILE_WHY[i]),
             "%s", panto_error_message(err).ptr);
      panto_error_free(err);
      err = NULL;
    }
    remove_hostile_files(dir, paths);
  }
  /* An attachment past max_message_bytes: a config error naming the limit, nothing sent. */
  {
    char big_path[] = "/tmp/panto-c-big-XXXXXX";
    int fd = mkstemp(big_path);
    CHECK(fd >= 0);
    static const unsigned char png_head[2008] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECK(write(fd, png_head, sizeof png_head) == (ssize_t)sizeof png_head);
    close(fd);
    PantoAgent *small = new_agent(&srv, "sk-c", ",\"max_message_bytes\":1024");
    char big[256];
    snprintf(big, sizeof big, "{\"input\":[\"x\",{\"type\":\"image\",\"path\":\"%s\"}]}",
             big_path);
    PantoStatus big_st =
        small == NULL ? PANTO_OK
                      : panto_agent_stream_with(small, "", 0, big, strlen(big), &stream, &err);
    unlink(big_path);
    panto_agent_free(small);
    CHECK(small != NULL && big_st == PANTO_ERROR && stream == NULL);
    CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
    CHECKF(str_contains(panto_error_message(err), big_path) &&
               str_contains(panto_error_message(err), "more than max_message_bytes (1024)"),
           "%s", panto_error_message(err).ptr);
    panto_error_free(err);
    err = NULL;
  }
  /* PDF bytes given as a PNG: a config error naming both types, nothing sent. */
  const char *pdf_as_png = "{\"input\":[{\"type\":\"image\",\"media_type\":\"image/png\","
                           "\"data\":\"JVBERi0xLjQ=\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, pdf_as_png, strlen(pdf_as_png), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err),
                      "input[0]: attachment: given as \"image/png\", but the bytes are "
                      "\"application/pdf\""),
         "%s", panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  CHECK(server_stat(&srv, "connections_total") == 1);

  const char *opts = "{\"input\":[\"What is in this picture?\","
                     "{\"type\":\"image\",\"data\":\"iVBORw0KGgp0aW55\"},"
                     "{\"type\":\"image\",\"url\":\"https://example.com/cat.png\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, opts, strlen(opts), &stream, &err) == PANTO_OK);
  PantoStatus st = drain(stream, NULL);
  CHECKF(st == PANTO_DONE, "status %d", st);
  panto_stream_free(stream);
  stream = NULL;
  CHECK(panto_agent_transcript_json(agent, &transcript, &err) == PANTO_OK);
  CHECKF(strstr(transcript.ptr, "{\"role\":\"user\",\"kind\":\"attachment\",\"text\":"
                                "\"image/png, 12 bytes\",\"attachment\":\"image\","
                                "\"media_type\":\"image/png\",\"size\":12}") != NULL &&
             strstr(transcript.ptr, "iVBOR") == NULL,
         "%s", transcript.ptr);
out:
  panto_string_free(&transcript);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_error_free(err);
  server_stop(&srv);
}

/* A host tool answered with text and an image (panto_stream_submit_tool_result_parts),
 * against tool-image-openai.json, whose server answers the second request only if the
 * tool's text and image reached it. Refused parts (a document, an unreadable file, bad
 * JSON) are PANTO_ERR_TOOL and leave the call waiting; tool_result carries the parts. */
static void test_tool_result_parts(void) {
  Turn turn;
  PantoError *err = NULL;
  CHECK(start_turn(&turn, shared_scenario("tool-image-openai.json"), "sk-c",
                   ",\"retry\":{\"max_retries\":0},\"tools\":[{\"name\":\"camera\"}]",
                   "What do you see?") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int results = 0;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      PantoToolCallStart *t = &ev.payload.tool_call_start;
      const char *refused[][2] = {
          {"[\"x\",{\"type\":\"document\",\"data\":\"JVBERi0xLjQ=\"}]", "text and images only"},
          {"[{\"type\":\"image\",\"path\":\"/no/such/shot.png\"}]", "/no/such/shot.png"},
          {"[\"x\",", "parts: not valid JSON"},
          /* A PDF given as a PNG: the bytes decide, a contradiction is refused. */
          {"[{\"type\":\"image\",\"media_type\":\"image/png\",\"data\":\"JVBERi0xLjQ=\"}]",
           "given as \"image/png\", but the bytes are \"application/pdf\""},
      };
      /* A FIFO, /dev/zero, a 64 GiB sparse file: refused at once, nothing read whole. */
      char dir[] = "/tmp/panto-c-files-XXXXXX";
      char paths[3][128];
      CHECK(make_hostile_files(dir, paths) == 0);
      for (int i = 0; i < 3; i++) {
        char parts[512];
        snprintf(parts, sizeof parts, "[{\"type\":\"image\",\"path\":\"%s\"}]", paths[i]);
        alarm(120);
        PantoStatus hostile = panto_stream_submit_tool_result_parts(
            turn.stream, t->call_id.ptr, t->call_id.len, parts, strlen(parts), false, &err);
        alarm(0);
        CHECK(hostile == PANTO_ERROR && panto_error_kind(err) == PANTO_ERR_TOOL);
        CHECKF(str_contains(panto_error_message(err), paths[i]) &&
                   str_contains(panto_error_message(err), HOSTILE_WHY[i]),
               "%s", panto_error_message(err).ptr);
        panto_error_free(err);
        err = NULL;
      }
      remove_hostile_files(dir, paths);
      for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(panto_stream_submit_tool_result_parts(turn.stream, t->call_id.ptr, t->call_id.len,
                                                    refused[i][0], strlen(refused[i][0]), false,
                                                    &err) == PANTO_ERROR);
        CHECK(panto_error_kind(err) == PANTO_ERR_TOOL);
        CHECKF(str_contains(panto_error_message(err), refused[i][1]), "%s",
               panto_error_message(err).ptr);
        panto_error_free(err);
        err = NULL;
      }
      const char *parts = "[\"one picture\",{\"type\":\"image\",\"data\":\"iVBORw0KGgp0aW55\"}]";
      CHECK(panto_stream_submit_tool_result_parts(turn.stream, t->call_id.ptr, t->call_id.len, parts,
                                                  strlen(parts), false, &err) == PANTO_OK);
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      PantoToolResult *r = &ev.payload.tool_result;
      results++;
      CHECK(str_eq(r->output, "one picture") && !r->is_error);
      CHECKF(str_eq(r->parts, "[{\"type\":\"text\",\"text\":\"one picture\"},{\"type\":\"image\","
                              "\"media_type\":\"image/png\",\"size\":12,\"data\":\"iVBORw0KGgp0aW55\"}]"),
             "%.*s", (int)r->parts.len, r->parts.ptr);
      PantoStr json;
      CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
      CHECK(str_contains(json, "\"is_error\":false,\"parts\":[{\"type\":\"text\""));
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      CHECK(str_eq(ev.payload.message_complete.text, "A cat."));
    }
  }
  CHECKF(st == PANTO_DONE, "status %d, error: %.*s", st, (int)ev.payload.error.message.len,
         ev.payload.error.message.ptr);
  CHECK(results == 1);
out:
  panto_error_free(err);
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"input_parts", test_input_parts},
    {"tool_result_parts", test_tool_result_parts},
};
const TestSuite ATTACHMENT_TESTS = {"test_attachments.c", TESTS,
                                    sizeof TESTS / sizeof TESTS[0]};

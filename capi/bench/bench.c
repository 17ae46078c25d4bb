/* The C row of scripts/bench.sh: panto's C ABI (panto_next_event) consuming the same
 * responses from the same panto-testserver as the other clients, with the same command
 * line and output as tests/peers-bench:
 *
 *   bench turns panto-next-event BASE_URL TURNS
 *
 * One JSON line per turn on stdout: wall, CPU (getrusage, every thread of the process:
 * the library's worker included), time to first event, the content events seen, and
 * the process's peak RSS. Turn 0 is cold: the agent is created inside it.
 *
 * A benchmark program: any failure makes the figures meaningless, so it prints the
 * error and exits 1. Built by scripts/bench.sh (release libpanto.a) and compiled by
 * scripts/test.sh. */
#define _POSIX_C_SOURCE 200809L
#include <panto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec from the parent. */
static long peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  fclose(f);
  return kib;
}

static void fail(const char *step, PantoError *err) {
  PantoStr msg = panto_error_message(err);
  fprintf(stderr, "bench: %s: %.*s\n", step, (int)msg.len, msg.ptr ? msg.ptr : "");
  panto_error_free(err);
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 5 || strcmp(argv[1], "turns") != 0 || strcmp(argv[2], "panto-next-event") != 0) {
    fprintf(stderr, "usage: bench turns panto-next-event BASE_URL TURNS\n");
    return 2;
  }
  const char *base_url = argv[3];
  int turns = atoi(argv[4]);
  char config[1024];
  /* max_steps 1: the tool workload's call names no tool of this agent; it gets an error
   * result and the turn ends after this one response, as the other clients' does. */
  int n = snprintf(config, sizeof config,
                   "{\"model\":\"gpt-4o\",\"base_url\":\"%s\",\"api_key\":\"sk-bench\","
                   "\"max_steps\":1}",
                   base_url);
  if (n < 0 || (size_t)n >= sizeof config) {
    fprintf(stderr, "bench: base URL too long\n");
    return 2;
  }
  PantoAgent *agent = NULL;
  PantoError *err = NULL;
  PantoEvent ev = PANTO_EVENT_INIT;
  for (int turn = 0; turn < turns; turn++) {
    if (agent && panto_agent_clear_history(agent, &err) != PANTO_OK) fail("clear history", err);
    double cpu0 = cpu_us(), t0 = now_us(), first = 0;
    if (!agent && panto_agent_new(config, (size_t)n, &agent, &err) != PANTO_OK)
      fail("agent", err);
    PantoStream *stream = NULL;
    if (panto_agent_stream(agent, "bench", 5, &stream, &err) != PANTO_OK) fail("stream", err);
    long items = 0;
    PantoStatus status;
    volatile size_t touched = 0;
    while ((status = panto_next_event(stream, &ev)) == PANTO_EVENT) {
      if (first == 0) first = now_us();
      if (ev.kind == PANTO_EV_CONTENT_DELTA) {
        touched += ev.payload.content_delta.text.len;
        items++;
      }
    }
    if (status != PANTO_DONE) {
      PantoStr msg = ev.payload.error.message;
      fprintf(stderr, "bench: turn failed: %.*s\n", (int)msg.len, msg.ptr ? msg.ptr : "");
      return 1;
    }
    panto_stream_free(stream);
    double wall = now_us() - t0, used = cpu_us() - cpu0;
    printf("{\"turn\":%d,\"wall_us\":%.1f,\"cpu_us\":%.1f,\"ttfe_us\":%.1f,\"items\":%ld,"
           "\"peak_rss_kib\":%ld}\n",
           turn, wall, used, first - t0, items, peak_rss_kib());
    fflush(stdout);
    (void)touched;
  }
  panto_agent_free(agent);
  return 0;
}

/* The self-check of the C tests' ThreadSanitizer step (run.sh): with capi/tsan.supp in
 * place, a data race in the host's own code must still be reported. Two threads use the
 * library (an agent each, created and freed: the library allocates, copies and frees on
 * their behalf) and increment one counter without synchronization. The program is
 * expected to FAIL under TSan with a report naming racy_increment. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "panto.h"

static long counter;

static void racy_increment(void) { counter++; }

static void *worker(void *arg) {
  (void)arg;
  for (int i = 0; i < 100; i++) {
    const char *cfg = "{\"provider\":\"openai\",\"model\":\"m\",\"api_key\":\"k\","
                      "\"base_url\":\"http://127.0.0.1:9/v1\"}";
    PantoAgent *agent = NULL;
    if (panto_agent_new(cfg, strlen(cfg), &agent, NULL) == PANTO_OK) panto_agent_free(agent);
    racy_increment();
  }
  return NULL;
}

int main(void) {
  pthread_t a, b;
  pthread_create(&a, NULL, worker, NULL);
  pthread_create(&b, NULL, worker, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("counter %ld\n", counter);
  return 0;
}

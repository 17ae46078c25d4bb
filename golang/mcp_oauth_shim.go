package panto

/*
#include <stdint.h>
#include "panto.h"

extern size_t pantoGoLoadTokens(void *, char *, size_t, char *, size_t);
extern void pantoGoSaveTokens(void *, char *, size_t, char *, size_t);
extern int pantoGoOpenURL(void *, char *, size_t);
extern void pantoGoFreeOAuth(void *);

static size_t panto_go_load(void *u, const char *url, size_t n, char *buf, size_t cap) {
  return pantoGoLoadTokens(u, (char *)url, n, buf, cap);
}
static void panto_go_save(void *u, const char *url, size_t n, const char *t, size_t tn) {
  pantoGoSaveTokens(u, (char *)url, n, (char *)t, tn);
}
static int panto_go_open(void *u, const char *url, size_t n) {
  return pantoGoOpenURL(u, (char *)url, n);
}
static void panto_go_free(void *u) { pantoGoFreeOAuth(u); }

static PantoStatus panto_go_set_mcp_oauth(PantoAgent *a, uintptr_t h, int store, int open,
                                          PantoError **err) {
  PantoMcpOAuthHooks hooks = {store ? panto_go_load : NULL, store ? panto_go_save : NULL,
                              open ? panto_go_open : NULL, (void *)h, panto_go_free};
  return panto_agent_set_mcp_oauth(a, &hooks, err);
}
*/
import "C"

// pantoSetMCPOAuth calls panto_agent_set_mcp_oauth with the Go callbacks and the handle
// h as user_data (the C side of setMCPOAuth: callbacks are C functions that call the
// exported Go ones, which cannot live in a file whose preamble defines C functions).
func pantoSetMCPOAuth(p *C.PantoAgent, h C.uintptr_t, store, open bool, err **C.PantoError) C.PantoStatus {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return C.panto_go_set_mcp_oauth(p, h, b(store), b(open), err)
}

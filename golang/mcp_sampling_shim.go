package panto

/*
#include <stdint.h>
#include "panto.h"

extern int pantoGoApproveSampling(void *, char *, size_t);
extern size_t pantoGoElicit(void *, char *, size_t, char *, size_t);
extern void pantoGoFreeClientHooks(void *);

static int panto_go_approve(void *u, const char *r, size_t n) {
  return pantoGoApproveSampling(u, (char *)r, n);
}
static size_t panto_go_elicit(void *u, const char *r, size_t n, char *buf, size_t cap) {
  return pantoGoElicit(u, (char *)r, n, buf, cap);
}
static void panto_go_free_client_hooks(void *u) { pantoGoFreeClientHooks(u); }

static PantoStatus panto_go_set_mcp_client_hooks(PantoAgent *a, uintptr_t h, int approve,
                                                 int elicit, PantoError **err) {
  PantoMcpClientHooks hooks = {approve ? panto_go_approve : NULL,
                               elicit ? panto_go_elicit : NULL, (void *)h,
                               panto_go_free_client_hooks};
  return panto_agent_set_mcp_client_hooks(a, &hooks, err);
}
*/
import "C"

// pantoSetMCPClientHooks calls panto_agent_set_mcp_client_hooks with the Go callbacks
// and the handle h as user_data (the C side of setMCPClientHooks: callbacks are C
// functions that call the exported Go ones, which cannot live in a file whose preamble
// defines C functions).
func pantoSetMCPClientHooks(p *C.PantoAgent, h C.uintptr_t, approve, elicit bool, err **C.PantoError) C.PantoStatus {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return C.panto_go_set_mcp_client_hooks(p, h, b(approve), b(elicit), err)
}

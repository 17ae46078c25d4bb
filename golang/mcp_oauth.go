package panto

/*
#include <stdint.h>
#include "panto.h"
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// MCPTokenStore keeps the OAuth tokens of MCP servers between runs (Config.MCPTokenStore),
// keyed by the server's URL. What is saved is panto's own JSON text (tokens, expiry, the
// registered client): a secret, to be kept as such and handed back unchanged. Its methods
// are called from the library's threads, possibly at once: they must be safe for
// concurrent use.
type MCPTokenStore interface {
	// Load returns the text last saved for serverURL, and whether there is one.
	Load(serverURL string) (string, bool)
	// Save keeps tokens for serverURL, replacing what was there.
	Save(serverURL, tokens string)
}

// oauthHooks is what the library's callbacks reach through their cgo.Handle.
type oauthHooks struct {
	store   MCPTokenStore
	openURL func(url string) error
}

// maxSavedTokens bounds the text a store's Load may hand the library.
const maxSavedTokens = 1 << 20

//export pantoGoLoadTokens
func pantoGoLoadTokens(userData unsafe.Pointer, url *C.char, urlLen C.size_t, buf *C.char, capacity C.size_t) (n C.size_t) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	hooks := cgo.Handle(uintptr(userData)).Value().(*oauthHooks)
	text, ok := hooks.store.Load(C.GoStringN(url, C.int(urlLen)))
	if !ok || text == "" || len(text) > maxSavedTokens {
		return 0
	}
	if len(text) <= int(capacity) {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity)), text)
	}
	return C.size_t(len(text))
}

//export pantoGoSaveTokens
func pantoGoSaveTokens(userData unsafe.Pointer, url *C.char, urlLen C.size_t, tokens *C.char, tokensLen C.size_t) {
	defer func() { _ = recover() }()
	hooks := cgo.Handle(uintptr(userData)).Value().(*oauthHooks)
	hooks.store.Save(C.GoStringN(url, C.int(urlLen)), C.GoStringN(tokens, C.int(tokensLen)))
}

//export pantoGoOpenURL
func pantoGoOpenURL(userData unsafe.Pointer, url *C.char, urlLen C.size_t) (r C.int) {
	defer func() {
		if recover() != nil {
			r = 2
		}
	}()
	hooks := cgo.Handle(uintptr(userData)).Value().(*oauthHooks)
	if err := hooks.openURL(C.GoStringN(url, C.int(urlLen))); err != nil {
		return 1
	}
	return 0
}

//export pantoGoFreeOAuth
func pantoGoFreeOAuth(userData unsafe.Pointer) {
	cgo.Handle(uintptr(userData)).Delete()
}

// setMCPOAuth lends the agent's MCP servers cfg's token store and URL opener, if any.
func setMCPOAuth(p *C.PantoAgent, cfg *Config) error {
	if cfg.MCPTokenStore == nil && cfg.MCPOpenURL == nil {
		return nil
	}
	h := cgo.NewHandle(&oauthHooks{store: cfg.MCPTokenStore, openURL: cfg.MCPOpenURL})
	var cerr *C.PantoError
	var st C.PantoStatus
	short(func() {
		st = pantoSetMCPOAuth(p, C.uintptr_t(h), cfg.MCPTokenStore != nil, cfg.MCPOpenURL != nil, &cerr)
	})
	if st != C.PANTO_OK {
		h.Delete()
		return withGoField(takeError(cerr), "Config", "")
	}
	return nil
}

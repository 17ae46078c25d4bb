package panto

import (
	"encoding/json"
	"errors"
)

// ErrorKind is the class of a failure, the same in every language panto supports.
type ErrorKind string

// The error kinds, in the order of the C ABI's codes (PANTO_ERR_CONFIG = 1, …).
const (
	KindConfig         ErrorKind = "config"         // bad configuration or argument (names the key)
	KindAuthentication ErrorKind = "authentication" // HTTP 401
	KindPermission     ErrorKind = "permission"     // HTTP 402, 403
	KindNotFound       ErrorKind = "not_found"      // HTTP 404
	KindBadRequest     ErrorKind = "bad_request"    // HTTP 400, 413, 422
	KindRateLimited    ErrorKind = "rate_limited"   // HTTP 429
	KindServer         ErrorKind = "server"         // HTTP 5xx, overloaded
	KindConnection     ErrorKind = "connection"     // could not connect, connection lost
	KindTimeout        ErrorKind = "timeout"        // a configured time limit was exceeded
	KindProtocol       ErrorKind = "protocol"       // malformed stream data
	KindProvider       ErrorKind = "provider"       // an error payload inside a 200 stream
	KindCancelled      ErrorKind = "cancelled"      // Cancel, Close or the stream's ctx
	KindBusy           ErrorKind = "busy"           // the agent already has an open stream
	KindTool           ErrorKind = "tool"           // host-tool misuse (e.g. an unknown call id)
	KindIncomplete     ErrorKind = "incomplete"     // the turn ended before message_complete
	KindInternal       ErrorKind = "internal"       // a bug in panto, caught and reported
)

// ErrorKinds lists every kind, in the order of the C ABI's codes.
var ErrorKinds = []ErrorKind{
	KindConfig, KindAuthentication, KindPermission, KindNotFound, KindBadRequest,
	KindRateLimited, KindServer, KindConnection, KindTimeout, KindProtocol, KindProvider,
	KindCancelled, KindBusy, KindTool, KindIncomplete, KindInternal,
}

// Error is a failure reported by panto. errors.Is(err, ErrRateLimited) and the other
// sentinels test its Kind; errors.As(err, &perr) gives the details. An error caused by
// the stream's context also matches context.Canceled or context.DeadlineExceeded.
// Messages never contain the API key.
type Error struct {
	Kind         ErrorKind
	Message      string
	Status       int    // HTTP status behind the error, 0 if none
	Retryable    bool   // whether repeating the same request could succeed
	ProviderCode string // the provider's own error type or code, empty if none

	cause    error
	sentinel bool
}

func sentinel(k ErrorKind) *Error { return &Error{Kind: k, Message: string(k), sentinel: true} }

// Sentinels, one per kind, for errors.Is. They match any *Error of their kind.
var (
	ErrConfig         = sentinel(KindConfig)
	ErrAuthentication = sentinel(KindAuthentication)
	ErrPermission     = sentinel(KindPermission)
	ErrNotFound       = sentinel(KindNotFound)
	ErrBadRequest     = sentinel(KindBadRequest)
	ErrRateLimited    = sentinel(KindRateLimited)
	ErrServer         = sentinel(KindServer)
	ErrConnection     = sentinel(KindConnection)
	ErrTimeout        = sentinel(KindTimeout)
	ErrProtocol       = sentinel(KindProtocol)
	ErrProvider       = sentinel(KindProvider)
	ErrCancelled      = sentinel(KindCancelled)
	ErrBusy           = sentinel(KindBusy)
	ErrTool           = sentinel(KindTool)
	ErrIncomplete     = sentinel(KindIncomplete)
	ErrInternal       = sentinel(KindInternal)
)

// Done is returned by Stream.Next after MessageComplete, on that call's successor and
// every later one. It is not a failure.
var Done = errors.New("panto: no more events")

// ErrClosed is returned by calls on a Stream or Agent after Close.
var ErrClosed = errors.New("panto: closed")

// Error formats the error as "panto: <kind>: <message>".
func (e *Error) Error() string {
	if e.sentinel {
		return "panto: " + string(e.Kind)
	}
	return "panto: " + string(e.Kind) + ": " + e.Message
}

// Is reports whether target is the sentinel of e's kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Kind == e.Kind
}

// Unwrap returns the context error that caused a cancellation, if any.
func (e *Error) Unwrap() error { return e.cause }

// MarshalJSON writes the canonical error JSON, {"type":"error","kind":…,"message":…,
// "status":…,"retryable":…,"provider_code":…}, the line `panto run --json` ends with
// on a failure.
func (e *Error) MarshalJSON() ([]byte, error) {
	var code *string
	if e.ProviderCode != "" {
		code = &e.ProviderCode
	}
	return json.Marshal(struct {
		Type         string    `json:"type"`
		Kind         ErrorKind `json:"kind"`
		Message      string    `json:"message"`
		Status       int       `json:"status"`
		Retryable    bool      `json:"retryable"`
		ProviderCode *string   `json:"provider_code"`
	}{"error", e.Kind, e.Message, e.Status, e.Retryable, code})
}

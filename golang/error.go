package panto

import (
	"encoding/json"
	"errors"
	"math"
	"time"
)

// ErrorKind is the class of a failure, the same in every language panto supports. The
// Kind* constants, ErrorKinds and the Err* sentinels (one per kind, for errors.Is) are
// generated into errors_gen.go from the core's vocabulary (scripts/gen.sh).
type ErrorKind string

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
	// RetryAfter is the wait the failed response asked for before a retry (retry-after-ms
	// or retry-after), 0 if it named none. A wait longer than Retry.MaxRetryAfter (default
	// 60 s) is not waited for: the stream fails at once with it here. Set on a stream's
	// errors (not on those of Compact).
	RetryAfter time.Duration
	// Output is the model's raw final answer for the structured-output kinds:
	// KindOutputInvalid (the text that did not match the schema, or did not decode into
	// RunAs's type), KindOutputRefused (the refusal) and KindOutputTruncated (the text
	// cut at max_tokens); empty for every other kind. Bounded by max_message_bytes and
	// redacted like the message.
	Output string

	cause    error
	sentinel bool
	closed   bool // caused by Close (matches ErrClosed)
}

func sentinel(k ErrorKind) *Error { return &Error{Kind: k, Message: string(k), sentinel: true} }

// ErrDone is returned by Stream.Next after MessageComplete, on that call's successor and
// every later one. It is not a failure: the turn ended as it should (compare it with ==
// or errors.Is, as io.EOF).
var ErrDone = errors.New("panto: no more events")

// ErrClosed matches (with errors.Is) the errors that Close causes: those of calls on a
// closed Agent, or on a Stream after Close or after its end (its library side is gone
// then), and the failure of a turn that Close ended (a Next it woke up, Err after it).
// It is an *Error of kind cancelled, and so are they: ErrCancelled matches them too,
// while ErrClosed matches no other cancellation.
var ErrClosed = &Error{Kind: KindCancelled, Message: "closed", sentinel: true, closed: true}

// nilError is the error of a method called on a nil or zero what (*Stream, *Agent),
// which made says how to get a real one.
func nilError(what, made string) *Error {
	return &Error{Kind: KindConfig, Message: "a nil or zero " + what + ": use the one " + made + " returns"}
}

// closedError is the error of a call on what Close freed (what: "the agent", …).
func closedError(what string) *Error {
	return &Error{Kind: KindCancelled, Message: what + " was closed", closed: true}
}

// Error formats the error as "panto: <kind>: <message>".
func (e *Error) Error() string {
	if e.sentinel && !e.closed {
		return "panto: " + string(e.Kind)
	}
	return "panto: " + string(e.Kind) + ": " + e.Message
}

// Is reports whether target is the sentinel of e's kind, or ErrClosed and e was caused
// by Close.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || !t.sentinel {
		return false
	}
	if t.closed {
		return e.closed
	}
	return t.Kind == e.Kind
}

// Unwrap returns the context error that caused a cancellation, if any.
func (e *Error) Unwrap() error { return e.cause }

// MarshalJSON writes the canonical error JSON, {"type":"error","kind":…,"message":…,
// "status":…,"retryable":…,"provider_code":…}, with "output" when the error has one:
// the line `panto run --json` ends with on a failure.
func (e *Error) MarshalJSON() ([]byte, error) {
	var code *string
	if e.ProviderCode != "" {
		code = &e.ProviderCode
	}
	var output *string
	if e.Output != "" {
		output = &e.Output
	}
	return json.Marshal(struct {
		Type         string    `json:"type"`
		Kind         ErrorKind `json:"kind"`
		Message      string    `json:"message"`
		Status       int       `json:"status"`
		Retryable    bool      `json:"retryable"`
		ProviderCode *string   `json:"provider_code"`
		Output       *string   `json:"output,omitempty"`
	}{"error", e.Kind, e.Message, e.Status, e.Retryable, code, output})
}

// millis is ms milliseconds as a Duration, saturated at the longest Duration.
func millis(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

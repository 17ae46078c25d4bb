/*
 * panto.h — the C ABI of panto, an embeddable LLM agent runtime (libpanto).
 *
 * This header is written by hand and is the contract: it is what the library promises.
 * scripts/check-header.sh compares it with the Rust implementation on every test run
 * (functions, struct layouts, constants, exported symbols, version), so the two cannot
 * drift apart unnoticed.
 *
 * ======================================================================================
 * Overview
 * ======================================================================================
 *
 * An agent (PantoAgent) holds one conversation with one provider configuration. Each
 * user input starts a turn; the whole turn — the model's text, its tool calls, their
 * results, further requests, until the model is done — arrives as ONE pull stream of
 * events (PantoStream):
 *
 *     PantoAgent *agent; PantoStream *stream; PantoError *err;
 *     if (panto_agent_new(cfg, strlen(cfg), &agent, &err) != PANTO_OK) { ... }
 *     if (panto_agent_stream(agent, "Hi", 2, &stream, &err) != PANTO_OK) { ... }
 *     PantoEvent ev = PANTO_EVENT_INIT;
 *     PantoStatus st;
 *     while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
 *         if (ev.kind == PANTO_EV_CONTENT_DELTA)
 *             fwrite(ev.payload.content_delta.text.ptr, 1, ev.payload.content_delta.text.len, stdout);
 *     }
 *     if (st != PANTO_DONE) { ... ev.payload.error holds the failure ... }
 *     panto_stream_free(stream);
 *     panto_agent_free(agent);
 *
 * The stream contract (the same in every language panto supports):
 *   1. message_complete is delivered exactly once per stream and is the last event.
 *   2. After it, every next call returns PANTO_DONE. PANTO_DONE is never returned
 *      before it: a turn that ends without it is a failure (kind incomplete).
 *   3. Failures are PANTO_ERROR, never events. After a failure, every later next call
 *      returns PANTO_ERROR again with the same kind; no event follows a failure.
 *   4. panto_stream_cancel may be called from any thread at any time; it wakes a
 *      blocked next call, which then fails with kind cancelled (unless message_complete
 *      was already delivered).
 *   5. Freeing a stream stops its turn and closes its HTTP connection promptly.
 *   6. The stream's queue is bounded (configuration key queue_capacity): a slow
 *      consumer slows the network read; memory does not grow with the turn.
 *   7. Host tools (declared in the configuration's "tools", implemented by the caller)
 *      arrive as tool_call_start with host set; answer each with
 *      panto_stream_submit_tool_result. The turn waits for the answer (up to the
 *      configured tool_timeout_ms).
 *
 * ======================================================================================
 * Conventions (they hold for every function unless its comment says otherwise)
 * ======================================================================================
 *
 * Status. Calls return a PantoStatus: PANTO_OK (0) or PANTO_ERROR (2); the next calls
 *   also PANTO_EVENT (0), PANTO_DONE (1) and PANTO_PENDING (3). Treat any other value
 *   as PANTO_ERROR.
 *
 * Errors. A call that can fail takes `PantoError **err` last. It is optional: pass NULL
 *   to ignore the details. On entry the library sets *err to NULL; on failure it stores
 *   a new PantoError there, which the caller owns and frees with panto_error_free.
 *   There is no thread-local "last error". The next calls report failures inside the
 *   event instead (kind PANTO_EV_ERROR, payload.error), so they need no second call.
 *   Every error has one kind (PANTO_ERR_*): invalid arguments (a NULL handle or
 *   out-pointer, invalid UTF-8, bad JSON) are PANTO_ERR_CONFIG, except for
 *   panto_stream_submit_tool_result and panto_stream_submit_tool_result_parts, where
 *   they are PANTO_ERR_TOOL, and a second
 *   concurrent next call on one stream, which is PANTO_ERR_BUSY (see Threads). A panic
 *   inside the library is caught and reported as PANTO_ERR_INTERNAL; it never unwinds
 *   into the caller, and the handle it happened on fails every later call with
 *   PANTO_ERR_INTERNAL (it is "poisoned"; it can still be freed). Errors and events
 *   never contain the API key or the value of a credential header.
 *
 * Out-pointers. On entry the library resets every non-NULL out-pointer (to NULL, or to
 *   an empty string), so after a failure there is nothing to free. A NULL out-pointer
 *   is an error, never a crash.
 *
 * Input strings are `const char *ptr, size_t len`: UTF-8, not NUL-terminated, and
 *   `ptr` may be NULL only when `len` is 0 (except where a function requires a value).
 *   Invalid UTF-8 is an error, never replaced. The library does not keep the pointer
 *   after the call returns.
 *
 * Output strings are PantoStr views: `len` bytes of valid UTF-8 at `ptr`, followed by a
 *   NUL byte as a convenience. They may contain NUL bytes themselves (model output can),
 *   so always use `len`. An absent optional value has `ptr == NULL` (and `len == 0`);
 *   a present empty string has a non-NULL `ptr`. A view is borrowed: its lifetime is
 *   stated where it is returned. PantoString is the one string the caller owns; free
 *   it with panto_string_free, never with free().
 *
 * Ownership. Every object the library creates has exactly one free function
 *   (panto_agent_free, panto_stream_free, panto_error_free, panto_string_free,
 *   panto_cancel_token_free, panto_ready_set_free); each
 *   accepts NULL as a no-op. Freeing twice is undefined behaviour (except
 *   panto_string_free, which empties the PantoString it frees).
 *
 * Threads. The library runs every turn on its own small pool of worker threads (one
 *   per core but one, at least one, whatever the number of streams; the environment
 *   variable PANTO_WORKER_THREADS, read when the first stream starts, sets another
 *   count from 1 to 64); it never calls back into the caller
 *   (except the MCP callbacks a host lends it, see "MCP OAuth" and "MCP sampling and
 *   elicitation") and never runs on the caller's thread except inside the calls below.
 *   - PantoAgent: every function may be called from any thread, concurrently, on the
 *     same agent — except panto_agent_free, which must not race another call on it.
 *     Streams keep what they need of their agent: freeing the agent while one of its
 *     streams is open is safe.
 *   - PantoStream: may be used from any thread (it is not tied to the thread that
 *     created it), but it has one consumer at a time: only one thread may be inside
 *     panto_next_event / panto_next_event_timeout / panto_next_events on it. A second
 *     concurrent next call waits, asleep, until the one inside returns (a timeout
 *     call: at most its timeout; a timeout of 0: not at all), then returns PANTO_ERROR
 *     with kind PANTO_ERR_BUSY and consumes nothing. That error is the calling
 *     thread's, not the stream's: it is not sticky (rule 3 does not apply), it is never
 *     repeated by a later call, and the event the other thread holds stays valid.
 *     Because it waits, a second consumer that retries does not spin (it wakes once per
 *     call of the first); but a second consumer is still a bug: whichever thread gets
 *     in next ends the lifetime of the other thread's event.
 *     panto_stream_cancel, panto_stream_submit_tool_result (and _parts),
 *     panto_stream_readiness_fd, panto_stream_attach, panto_stream_checkpoint,
 *     panto_stream_steer, panto_stream_take_undelivered and the two diagnostics may be
 *     called from any thread at any time, including while another thread is blocked in
 *     a next call. panto_stream_free must not race any
 *     other call on the stream: to stop a consumer blocked on another thread, call
 *     panto_stream_cancel, let (or make) that thread return, then free.
 *   - PantoError and delivered events are plain data: read them from any thread.
 *   - PantoCancelToken: cancel it from any thread at any time; free it only once no call
 *     uses it.
 *   - PantoReadySet: every function may be called from any thread, concurrently —
 *     except panto_ready_set_free, which must not race another call on the set.
 *
 * Fork. The worker threads do not survive fork(), and the library knows it: a child
 *   starts a pool of its own on its first turn, so agents made in the child work as in
 *   any process — the pre-fork server pattern (a parent that ran turns, then forks
 *   workers that each make their own agents) is supported. Agents and streams the
 *   child inherited belong to threads that are gone: every call on them fails at once
 *   with PANTO_ERR_CONFIG saying so (panto_stream_cancel does nothing and returns
 *   PANTO_OK), nothing waits for the parent's threads, and freeing them in the child
 *   never blocks (their copy in the child is left alone, not freed). The parent is
 *   unaffected and keeps using them. (A child of a process that never started a turn
 *   may use the inherited agents too.) A child that calls exec() needs none of this.
 *   A stream's readiness descriptor is inherited too and is the same object as the
 *   parent's (close-on-exec, so not across exec): the child must not wait on it or read
 *   it; panto_stream_readiness_fd on an inherited stream fails.
 *   A ready set made before the fork is the parent's in the child (its descriptor is
 *   the same object as the parent's): inert there — panto_ready_set_fd fails,
 *   panto_ready_set_take returns 0, panto_stream_attach to it fails, and
 *   panto_ready_set_free closes only the child's copy of the descriptor, never
 *   touching the parent's readiness. The child makes a set of its own.
 *
 * Signals. The library installs no signal handler and never changes the process's
 *   signal dispositions or the signal mask of any thread it did not create. Its own
 *   threads (the workers and their name-resolution helpers), which are the only threads
 *   that write to its sockets, block SIGPIPE: a connection the server resets while a
 *   request is being written fails the turn with PANTO_ERR_CONNECTION, whatever the
 *   host's SIGPIPE disposition — the default (terminate) included. No call of this
 *   header writes to a socket on the caller's thread.
 *
 * Undefined behaviour. Everything the library can check, it checks (NULL pointers,
 *   UTF-8, struct_size, a stale copy of an event — see each function). What it cannot
 *   check is undefined, and this is the complete list:
 *   - using a handle after its free function (agent, stream, error, cancel token,
 *     ready set), or freeing one twice (panto_string_free excepted), or a pointer the
 *     library did not return as a handle;
 *   - reading, writing or closing a stream's readiness descriptor or a ready set's
 *     descriptor, or using its number after panto_stream_free / panto_ready_set_free
 *     (it may be another file's by then);
 *   - panto_agent_free racing another call on that agent; panto_stream_free racing
 *     another call on that stream; panto_cancel_token_free racing a call using it;
 *     panto_ready_set_free racing another call on that set;
 *   - reading an event's strings, or passing the event (or a copy) to
 *     panto_event_to_json, after its lifetime (see PantoEvent) — in particular after
 *     panto_stream_free. Within the stream's life, panto_event_to_json on a copy of an
 *     earlier event is detected and fails (the generation check); reading the copy's
 *     strings is not detected;
 *   - panto_event_to_json on an event that no next call filled and that is not
 *     zero-initialized (PANTO_EVENT_INIT), or whose _private or _private_gen the
 *     caller changed;
 *   - a struct_size larger than the memory the event really has (only the sizes of
 *     released versions are accepted, but the library cannot see the allocation);
 *   - input pointers that do not point to `len` readable bytes, or whose bytes change
 *     during the call; out-pointers that do not point to writable storage of their type;
 *   - writing through a PantoStr view, or freeing its pointer;
 *   - PantoString freed with anything but panto_string_free.
 *
 * Linking. Link with -lpanto (pkg-config --cflags --libs panto). The static library
 *   libpanto.a also needs the system libraries of the Rust runtime:
 *   pkg-config --static --libs panto lists them. Two Rust static libraries in one
 *   program may clash on runtime symbols; prefer the shared library then.
 *
 * ======================================================================================
 * Compatibility rules (how this ABI grows without breaking what was built against it)
 * ======================================================================================
 *
 * Within one major version (PANTO_ABI_VERSION_MAJOR, also the soname libpanto.so.N),
 * changes are additive only, and a program built against an older minor keeps working
 * with a newer library, and the other way round for everything it uses:
 *   - New functions may be added; existing signatures, struct layouts and constant
 *     values never change. Check panto_abi_version() at start-up: same major, and a
 *     minor at least the one you were built against if you use newer functions.
 *   - New event kinds may be added (codes 11 and up, in the order of the events table):
 *     skip any kind you do not know. Nothing needs releasing per event, so skipping
 *     is always safe. New error kinds may be added (17 and up): treat an unknown kind
 *     as a generic failure. Likewise for the PANTO_BLOCK_*, PANTO_DELTA_* and
 *     PANTO_CONTENT_* codes.
 *   - New fields may be added to a payload struct only at its end and only within the
 *     payload union's fixed size (its _reserved arm); new fields of PantoEvent go after
 *     `payload`. The library zero-fills everything it does not set, so a zero field
 *     means "absent" to a newer reader of an older library.
 *   - struct_size: the caller sets it to sizeof(PantoEvent) as the caller's header has
 *     it. A library accepts exactly the sizes of PantoEvent in released ABI versions —
 *     today only PANTO_EVENT_SIZE_1_0 (280: 1.0 and 1.1 have the same struct) — and
 *     refuses any other value as garbage (a forgotten PANTO_EVENT_INIT) without writing
 *     anything. A later minor that appends fields to PantoEvent adds its size to the
 *     accepted ones and keeps every earlier one, so programs built against 1.0 keep
 *     working; it writes the fields it knows that fit, zero-fills the rest up to
 *     struct_size, and never touches a byte beyond it. A program built against such a
 *     later header that must also run on older libraries sets struct_size to
 *     PANTO_EVENT_SIZE_1_0 (and reads only 1.0's fields). (Until 1.1.0 any size from
 *     1.0's up to PANTO_EVENT_MAX_STRUCT_SIZE was accepted and zero-filled.)
 *   - Reserved fields (_reserved*, flags) are zero in this version; never rely on their
 *     contents.
 *   - ABI 1.1 added a pollable readiness file descriptor per stream
 *     (panto_stream_readiness_fd) without changing anything of 1.0: events already
 *     passed through a per-stream queue, a timeout of 0 never blocked, cancel was latched
 *     and woke a waiter, and the terminal protocol above (one message_complete then
 *     PANTO_DONE forever, or one error repeated forever) tells a poller when to stop.
 *   - ABI 1.2 added ready sets (PantoReadySet, panto_stream_attach): one descriptor for
 *     many streams, so that waiting costs no descriptor per stream. A stream that is
 *     never attached behaves exactly as in 1.1.
 *     It also added tool results of text and image parts
 *     (panto_stream_submit_tool_result_parts, PantoToolResult.parts) and structured
 *     output (PANTO_EV_OUTPUT_REPAIR, PantoMessageComplete.output,
 *     PantoErrorInfo.output and the PANTO_ERR_OUTPUT_* kinds).
 *   - ABI 1.3 added durable turns (see "Durable turns" below): checkpoints
 *     (panto_stream_checkpoint), resuming a turn in any process with answers to its
 *     deferred calls (panto_agent_resume; the tool keys "needs_approval" and "external",
 *     the turn option "defer_tools", the stop reason "deferred",
 *     PantoMessageComplete.deferred), and steering a running turn (panto_stream_steer,
 *     panto_stream_take_undelivered, PANTO_EV_STEERING_DELIVERED). A turn that uses none
 *     of them behaves exactly as in 1.2. It also added the progress of running tool
 *     calls (PANTO_EV_TOOL_PROGRESS) and MCP servers' log lines (PANTO_EV_SERVER_LOG,
 *     only for a server whose "log_level" is set); a reader that ignores kinds it does
 *     not know is unaffected. And calling an MCP tool outside a turn
 *     (panto_agent_call_mcp_tool), for engines that run each call as a step. And MCP
 *     servers' own requests, each only for a server whose configuration enables it:
 *     sampling through the agent's provider ("sampling", PANTO_EV_MCP_SAMPLING_REQUEST)
 *     and elicitation ("elicitation", PANTO_EV_MCP_ELICITATION_REQUEST, declined unless
 *     the host answers it). And fallback models (the "fallback" configuration key,
 *     PANTO_EV_PROVIDER_FALLBACK, PantoMessageComplete.model).
 */
#ifndef PANTO_H
#define PANTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(PANTO_STATIC)
#define PANTO_API __declspec(dllimport)
#else
#define PANTO_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------- */
/* Versions                                                                            */
/* ---------------------------------------------------------------------------------- */

#define PANTO_ABI_VERSION_MAJOR 1
#define PANTO_ABI_VERSION_MINOR 3
/* The version this header describes, in the form panto_abi_version() returns. */
#define PANTO_ABI_VERSION ((PANTO_ABI_VERSION_MAJOR << 16) | PANTO_ABI_VERSION_MINOR)

/* ---------------------------------------------------------------------------------- */
/* Status codes                                                                        */
/* ---------------------------------------------------------------------------------- */

typedef int32_t PantoStatus;

#define PANTO_OK 0      /* success (calls other than next) */
#define PANTO_EVENT 0   /* next: an event was delivered */
#define PANTO_DONE 1    /* next: the stream is exhausted (after message_complete) */
#define PANTO_ERROR 2   /* failure; next: the event holds the error */
#define PANTO_PENDING 3 /* next with a timeout: nothing arrived in time */

/* ---------------------------------------------------------------------------------- */
/* Event kinds (PantoEvent.kind). Plain integers, never a C enum: skip unknown ones.    */
/* ---------------------------------------------------------------------------------- */

#define PANTO_EV_NONE 0 /* no event: PANTO_DONE or PANTO_PENDING */
#define PANTO_EV_MESSAGE_START 1
#define PANTO_EV_BLOCK_START 2
#define PANTO_EV_CONTENT_DELTA 3
#define PANTO_EV_TOOL_DETAILS 4
#define PANTO_EV_BLOCK_COMPLETE 5
#define PANTO_EV_MESSAGE_END 6
#define PANTO_EV_TOOL_CALL_START 7
#define PANTO_EV_TOOL_RESULT 8
#define PANTO_EV_PROVIDER_RETRY 9
#define PANTO_EV_MESSAGE_COMPLETE 10
#define PANTO_EV_HISTORY_COMPACTED 11 /* since ABI 1.1 */
#define PANTO_EV_OUTPUT_REPAIR 12     /* since ABI 1.2 (structured output) */
#define PANTO_EV_STEERING_DELIVERED 13 /* since ABI 1.3 (durable turns) */
#define PANTO_EV_TOOL_PROGRESS 14      /* since ABI 1.3 (tool progress) */
#define PANTO_EV_SERVER_LOG 15         /* since ABI 1.3 (MCP server logs) */
#define PANTO_EV_MCP_SAMPLING_REQUEST 16    /* since ABI 1.3 (MCP sampling) */
#define PANTO_EV_MCP_ELICITATION_REQUEST 17 /* since ABI 1.3 (MCP elicitation) */
#define PANTO_EV_PROVIDER_FALLBACK 18  /* since ABI 1.3 (fallback models) */
#define PANTO_EV_ERROR 256 /* with PANTO_ERROR: payload.error holds the failure */

/* ---------------------------------------------------------------------------------- */
/* Error kinds (panto_error_kind, PantoErrorInfo.kind). Unknown kinds: a generic error. */
/* ---------------------------------------------------------------------------------- */

#define PANTO_ERR_CONFIG 1         /* bad configuration or argument (names the key) */
#define PANTO_ERR_AUTHENTICATION 2 /* HTTP 401 */
#define PANTO_ERR_PERMISSION 3     /* HTTP 402, 403 */
#define PANTO_ERR_NOT_FOUND 4      /* HTTP 404 (e.g. an unknown model) */
#define PANTO_ERR_BAD_REQUEST 5    /* HTTP 400, 413, 422 */
#define PANTO_ERR_RATE_LIMITED 6   /* HTTP 429 */
#define PANTO_ERR_SERVER 7         /* HTTP 5xx, overloaded */
#define PANTO_ERR_CONNECTION 8     /* could not connect, connection lost */
#define PANTO_ERR_TIMEOUT 9        /* connect_ms, idle_ms or request_ms exceeded */
#define PANTO_ERR_PROTOCOL 10      /* malformed stream data */
#define PANTO_ERR_PROVIDER 11      /* an error payload inside a 200 stream */
#define PANTO_ERR_CANCELLED 12     /* panto_stream_cancel */
#define PANTO_ERR_BUSY 13          /* the agent already has an open stream; or another
                                      thread is inside a next call on the stream */
#define PANTO_ERR_TOOL 14          /* host-tool misuse (e.g. an unknown call id) */
#define PANTO_ERR_INCOMPLETE 15    /* the turn ended before message_complete */
#define PANTO_ERR_INTERNAL 16      /* a bug in panto, caught and reported */
/* Structured output (the "output_schema" config key), since ABI 1.2. The
 * model's raw final text is the error JSON's "output" (panto_error_to_json). */
#define PANTO_ERR_OUTPUT_INVALID 17   /* the answer did not match the schema after every
                                         repair (output_retries), or was not JSON */
#define PANTO_ERR_OUTPUT_REFUSED 18   /* the model refused to answer */
#define PANTO_ERR_OUTPUT_TRUNCATED 19 /* the answer stopped at max_tokens; not parsed */

/* block_start.kind */
#define PANTO_BLOCK_TEXT 1
#define PANTO_BLOCK_REASONING 2 /* redacted reasoning included */
#define PANTO_BLOCK_TOOL_CALL 3

/* content_delta.kind */
#define PANTO_DELTA_TEXT 1
#define PANTO_DELTA_REASONING 2
#define PANTO_DELTA_TOOL_ARGS 3

/* block_complete.content_type */
#define PANTO_CONTENT_TEXT 1
#define PANTO_CONTENT_REASONING 2
#define PANTO_CONTENT_REDACTED_REASONING 3
#define PANTO_CONTENT_TOOL_CALL 4

/* sizeof(PantoEvent) in ABI 1.0 and 1.1: the struct_size every 1.x library accepts. */
#define PANTO_EVENT_SIZE_1_0 280
/* No accepted PantoEvent.struct_size is larger (the accepted sizes are exactly those of
 * released versions; see Compatibility rules). */
#define PANTO_EVENT_MAX_STRUCT_SIZE 4096

/* ---------------------------------------------------------------------------------- */
/* Handles and strings                                                                 */
/* ---------------------------------------------------------------------------------- */

/* An agent: one conversation, one provider configuration. */
typedef struct PantoAgent PantoAgent;
/* One turn, as a pull stream of events. */
typedef struct PantoStream PantoStream;
/* A failure, owned by the caller (panto_error_free). */
typedef struct PantoError PantoError;
/* Since ABI 1.1. Cancels a blocking call from another thread (panto_agent_compact). */
typedef struct PantoCancelToken PantoCancelToken;
/* Since ABI 1.2. One readiness descriptor for many streams (panto_stream_attach). */
typedef struct PantoReadySet PantoReadySet;

/* A borrowed UTF-8 string (see Conventions). */
typedef struct PantoStr {
  const char *ptr;
  size_t len;
} PantoStr;

/* A string owned by the caller: `len` bytes of UTF-8 at `ptr`, then a NUL.
 * Free it with panto_string_free. */
typedef struct PantoString {
  char *ptr;
  size_t len;
} PantoString;

/* ---------------------------------------------------------------------------------- */
/* Events                                                                              */
/*                                                                                     */
/* `message` is the 0-based index of the assistant message within the turn, `block`    */
/* the 0-based index of a content block within that message. Field names follow the     */
/* event's canonical JSON (panto_event_to_json).                                        */
/* ---------------------------------------------------------------------------------- */

/* Token counts. For message_end: that response; for message_complete: the turn.
 *
 * `reported` (since ABI 1.1) tells a real zero from an unknown count: true when the
 * provider sent a usage report with an input or output count for the response; false
 * when it sent none (llama.cpp and others send none in streams, even when asked with
 * stream_options.include_usage) — every count is then 0, meaning "unknown", not zero.
 * For message_complete it is true only if every response of the turn was reported; if
 * one was not, the counts cover the responses that were. A library older than 1.1
 * leaves it 0 (false) whatever the server sent: check panto_abi_version() if that
 * matters. PantoUsage is the last member of both payloads that hold it, so fields
 * appended here are appended to those payloads (within the union's fixed size). */
typedef struct PantoUsage {
  uint64_t input_tokens;
  uint64_t output_tokens;
  uint64_t cache_read_tokens;
  uint64_t cache_write_tokens;
  uint64_t reasoning_tokens;
  bool reported; /* since ABI 1.1: false = the provider sent no usage (unknown) */
  uint8_t _reserved0[7];
} PantoUsage;

/* PANTO_EV_MESSAGE_START: a provider response begins. */
typedef struct PantoMessageStart {
  uint32_t message;
  uint32_t _reserved0;
  PantoStr model;
  PantoStr response_id; /* absent if the provider sent none */
  /* Since ABI 1.3: milliseconds the request waited for the endpoint's
   * max_concurrent_requests (0: it did not wait, or the agent sets no limit). */
  uint64_t queued_ms;
} PantoMessageStart;

/* PANTO_EV_BLOCK_START: a content block opens. */
typedef struct PantoBlockStart {
  uint32_t message;
  uint32_t block;
  uint32_t kind; /* PANTO_BLOCK_* */
  uint32_t _reserved0;
} PantoBlockStart;

/* PANTO_EV_CONTENT_DELTA: a fragment of a block arrives. */
typedef struct PantoContentDelta {
  uint32_t message;
  uint32_t block;
  uint32_t kind; /* PANTO_DELTA_* */
  uint32_t _reserved0;
  PantoStr text;
} PantoContentDelta;

/* PANTO_EV_TOOL_DETAILS: the id and name of a tool_call block, once both are known. */
typedef struct PantoToolDetails {
  uint32_t message;
  uint32_t block;
  PantoStr call_id;
  PantoStr name;
} PantoToolDetails;

/* PANTO_EV_BLOCK_COMPLETE: a block closed. `content` is its canonical JSON, e.g.
 * {"type":"text","text":"…"} or {"type":"tool_call","call_id":…,"name":…,"arguments":{…}};
 * the other strings are parts of it, absent where the content type has no such part. */
typedef struct PantoBlockComplete {
  uint32_t message;
  uint32_t block;
  uint32_t content_type; /* PANTO_CONTENT_* */
  uint32_t _reserved0;
  PantoStr content;
  PantoStr text;          /* text / reasoning: the text; redacted_reasoning: the data */
  PantoStr signature;     /* reasoning: its signature, if any */
  PantoStr call_id;       /* tool_call */
  PantoStr name;          /* tool_call */
  PantoStr arguments;     /* tool_call: the parsed arguments as JSON text; absent if they did not parse */
  PantoStr arguments_raw; /* tool_call: the raw text when the arguments did not parse */
} PantoBlockComplete;

/* PANTO_EV_MESSAGE_END: one assistant message ended (not the end of the turn). */
typedef struct PantoMessageEnd {
  uint32_t message;
  uint32_t _reserved0;
  PantoStr stop_reason; /* end_turn, tool_use, max_tokens, stop_sequence, refusal,
                           content_filter, max_steps, deferred (since ABI 1.3), or
                           other:<raw> */
  PantoUsage usage;
} PantoMessageEnd;

/* PANTO_EV_TOOL_CALL_START: dispatch of one tool call begins. With `host` set, the
 * caller must answer it: panto_stream_submit_tool_result(stream, call_id, …). */
typedef struct PantoToolCallStart {
  uint32_t message;
  bool host;
  uint8_t _reserved0[3];
  PantoStr call_id;
  PantoStr name;
  PantoStr arguments;     /* the arguments object as JSON text; absent when the model's
                             arguments were not a JSON object (see arguments_raw) */
  PantoStr arguments_raw; /* the model's raw arguments, present only when not an object */
} PantoToolCallStart;

/* PANTO_EV_TOOL_RESULT: a tool call finished (in the order they finish). `output` is
 * the text the model reads. `parts` (since ABI 1.2; zero from older libraries) is
 * present only when the tool returned an image: the result's text and image parts in
 * order, as the JSON array of the event's canonical form, e.g.
 *   [{"type":"text","text":"…"},
 *    {"type":"image","media_type":"image/png","size":1234,"data":"<base64>"}]
 * (`size` is the decoded byte count; an image by URL is {"type":"image","url":"…"}). */
typedef struct PantoToolResult {
  uint32_t message;
  bool is_error;
  uint8_t _reserved0[3];
  PantoStr call_id;
  PantoStr name;
  PantoStr output;
  PantoStr parts; /* since ABI 1.2: JSON array; absent unless the tool returned an image */
} PantoToolResult;

/* PANTO_EV_PROVIDER_RETRY: a request failed before any of its answer was shown and is
 * tried again after delay_ms. */
typedef struct PantoProviderRetry {
  uint32_t message;
  uint32_t attempt;      /* the attempt about to start (2 for the first retry) */
  uint32_t max_attempts; /* 1 + retry.max_retries */
  uint32_t status;       /* HTTP status of the failure, 0 if none */
  uint64_t delay_ms;
  PantoStr reason;
} PantoProviderRetry;

/* PANTO_EV_MESSAGE_COMPLETE: the turn is over (terminal; PANTO_DONE follows). */
typedef struct PantoMessageComplete {
  uint32_t messages; /* assistant messages in the turn */
  uint32_t _reserved0;
  PantoStr stop_reason;
  PantoStr text; /* the final assistant message's text */
  PantoUsage usage;  /* the turn's total */
  /* Since ABI 1.2: the validated structured output as JSON text, when an
   * output schema applied to the turn; absent otherwise (and from older libraries,
   * which zero-fill it). */
  PantoStr output;
  /* Since ABI 1.3 (durable turns), at the end of the struct within the payload union's
   * fixed size: when stop_reason is "deferred" — the turn paused, its stream ends here —
   * the calls it paused for, as a JSON array in call order:
   *   [{"call_id": "…", "name": "…", "arguments": {…},
   *     "reason": "approval" | "external" | "deferred"}]
   * ("approval": the tool's "needs_approval"; "external": the tool's "external";
   * "deferred": the turn option "defer_tools"). Answer them with panto_agent_resume on
   * the stream's checkpoint. Absent (ptr NULL) for every other stop reason, and from
   * older libraries (which zero-fill it). Borrowed like the event's other strings. */
  PantoStr deferred;
  /* Since ABI 1.3 (fallback models), at the end of the struct within the payload
   * union's fixed size: the model that answered the turn's last request, as the
   * configuration names it — the agent's "model" (or the turn's "model" option), or that
   * of the "fallback" entry the turn went to (PANTO_EV_PROVIDER_FALLBACK). Absent (ptr
   * NULL) from older libraries, which zero-fill it. */
  PantoStr model;
} PantoMessageComplete;

/* PANTO_EV_HISTORY_COMPACTED (since ABI 1.1): automatic compaction (the "compaction"
 * config key) summarized the older history before the next request. Counts of the
 * history's messages and tokens; tokens_before comes from the provider's usage when
 * known (else it is estimated as bytes / 4); tokens_after is estimated in the same
 * measure (bytes / 4 scaled by the provider's count of the old history). */
typedef struct PantoHistoryCompacted {
  uint64_t messages_before;
  uint64_t messages_after;
  uint64_t tokens_before;
  uint64_t tokens_after;
} PantoHistoryCompacted;

/* PANTO_EV_OUTPUT_REPAIR (since ABI 1.2): the answer of assistant message
 * `message` did not match the output schema; it stays in the history, `error` goes back
 * to the model in a user message, and a repair request follows. */
typedef struct PantoOutputRepair {
  uint32_t message;
  uint32_t attempt;      /* the repair about to be asked for (1 for the first) */
  uint32_t max_attempts; /* output_retries */
  uint32_t _reserved0;
  PantoStr error; /* the validation error sent back (one line, bounded) */
} PantoOutputRepair;

/* PANTO_EV_STEERING_DELIVERED (since ABI 1.3): a message queued by panto_stream_steer
 * entered the conversation as a user message, at a step boundary (after the step's tool
 * results, before the next request), and the next request carries it. One event per
 * queued message, in the order they were queued. If the model's message would have
 * ended the turn, the turn goes on instead, so that the model answers it. */
typedef struct PantoSteeringDelivered {
  uint32_t message; /* the index of the assistant message that will answer it */
  uint32_t _reserved0;
  PantoStr text; /* the message's text (its text parts, joined; attachments are not
                    shown here) */
} PantoSteeringDelivered;

/* PANTO_EV_TOOL_PROGRESS (since ABI 1.3): a running tool call reported progress (an
 * MCP server's notifications/progress for the call, or a Rust tool's report). Coalesced:
 * at most one per call every 100 ms, carrying the latest report; the last report is
 * always delivered before the call's PANTO_EV_TOOL_RESULT. */
typedef struct PantoToolProgress {
  uint32_t message; /* 0-based index of the assistant message within the turn */
  uint32_t _reserved0;
  PantoStr call_id;
  PantoStr name;
  double progress; /* progress so far, in the tool's own unit (finite) */
  double total;    /* the total it goes to (positive); 0 when the tool gave none */
  PantoStr text;   /* what the tool is doing (one line, at most 500 bytes); absent if
                      it said nothing */
} PantoToolProgress;

/* PANTO_EV_SERVER_LOG (since ABI 1.3): an MCP server sent a log line at or above its
 * "log_level" (default "off": none) while one of its tools ran in this turn; at most
 * 100 per call. */
typedef struct PantoServerLog {
  PantoStr server; /* the server's name (its key in "mcp_servers") */
  PantoStr level;  /* debug, info, notice, warning, error, critical, alert, emergency */
  PantoStr logger; /* the logger's name (at most 100 bytes); absent if none */
  PantoStr data;   /* the line: a string as sent, anything else as its JSON (at most
                      2000 bytes) */
} PantoServerLog;

/* PANTO_EV_MCP_SAMPLING_REQUEST (since ABI 1.3): an MCP server whose "sampling" is
 * enabled asked the agent's model for a message (sampling/createMessage) while one of
 * its tools ran in this turn; the request's usage is counted in the turn's. Delivered
 * once it was settled, before the call's PANTO_EV_TOOL_RESULT. */
typedef struct PantoMcpSamplingRequest {
  PantoStr server;     /* the server's name (its key in "mcp_servers") */
  PantoStr summary;    /* the first line of the last message's text (at most 200 bytes) */
  uint64_t max_tokens; /* the request's output limit (at most "sampling_max_tokens") */
  PantoStr outcome;    /* "answered", "denied" (the host refused it) or "failed" */
} PantoMcpSamplingRequest;

/* PANTO_EV_MCP_ELICITATION_REQUEST (since ABI 1.3): an MCP server whose "elicitation"
 * is enabled asked the host a question (elicitation/create) while one of its tools ran
 * in this turn. Delivered once it was settled, before the call's PANTO_EV_TOOL_RESULT. */
typedef struct PantoMcpElicitationRequest {
  PantoStr server;  /* the server's name (its key in "mcp_servers") */
  PantoStr message; /* the server's message to the person (at most 200 bytes) */
  PantoStr outcome; /* "accept", "decline", "cancel", or "invalid" (an accepted answer
                       did not match the requested schema: the server got an error) */
} PantoMcpElicitationRequest;

/* PANTO_EV_PROVIDER_FALLBACK (since ABI 1.3): a request failed after its retries,
 * before any block of its answer was shown, with kind rate_limited, server, connection
 * or timeout, or a provider error that says it is overloaded: the step goes to the next
 * model of the configuration's "fallback" list, and the rest of the turn stays on it (a
 * checkpoint taken from here on resumes there). Emitted before that request. */
typedef struct PantoProviderFallback {
  uint32_t message; /* the assistant message the failed request was for */
  uint32_t status;  /* HTTP status of the failure, 0 if none */
  PantoStr from_provider; /* the provider that failed ("openai", "anthropic", …) */
  PantoStr from_model;    /* its model, as the configuration names it */
  PantoStr to_provider;   /* the provider the step goes to */
  PantoStr to_model;      /* its model */
  PantoStr error_kind;    /* the failure's kind name ("server", "rate_limited", …) */
  PantoStr error_message; /* the failure's message (one line, secrets removed) */
} PantoProviderFallback;

/* PANTO_EV_ERROR (status PANTO_ERROR): the failure; the same fields as PantoError. */
typedef struct PantoErrorInfo {
  uint32_t kind;   /* PANTO_ERR_* */
  uint32_t status; /* HTTP status, 0 if none */
  bool retryable;  /* whether repeating the same request could succeed */
  uint8_t _reserved0[7];
  PantoStr message;
  PantoStr provider_code; /* the provider's own error type or code; absent if none */
  /* The wait the failed response asked for before a retry (retry-after-ms or
   * retry-after), in milliseconds; 0 if it named none (and from libraries before this
   * field, which zero-fill it). Set whether or not panto retried: a wait longer than
   * retry.max_retry_after_ms fails the turn at once, with that wait here. Added after
   * ABI 1.1.0, at the end of the struct within the payload union's fixed size. */
  uint64_t retry_after_ms;
  /* Since ABI 1.2 (structured output), at the end of the struct within the
   * payload union's fixed size: the model's raw final answer for
   * PANTO_ERR_OUTPUT_INVALID (the text that did not match the output schema),
   * PANTO_ERR_OUTPUT_REFUSED (the refusal) and PANTO_ERR_OUTPUT_TRUNCATED (the text cut
   * at max_tokens); absent (ptr NULL) for every other kind, and from older libraries
   * (which zero-fill it). Bounded by max_message_bytes, redacted like the message. Only
   * a turn's failure has these kinds, so PantoError (the other calls' errors) never
   * carries an output; panto_error_to_json would write it as "output". */
  PantoStr output;
} PantoErrorInfo;

/* One arm per kind. The _reserved arm fixes the union's size (256 bytes) for the kinds
 * and fields of later versions. */
typedef union PantoEventPayload {
  PantoMessageStart message_start;
  PantoBlockStart block_start;
  PantoContentDelta content_delta;
  PantoToolDetails tool_details;
  PantoBlockComplete block_complete;
  PantoMessageEnd message_end;
  PantoToolCallStart tool_call_start;
  PantoToolResult tool_result;
  PantoProviderRetry provider_retry;
  PantoMessageComplete message_complete;
  PantoErrorInfo error;
  PantoHistoryCompacted history_compacted; /* since ABI 1.1 */
  PantoOutputRepair output_repair;         /* since ABI 1.2 */
  PantoSteeringDelivered steering_delivered; /* since ABI 1.3 */
  PantoToolProgress tool_progress;            /* since ABI 1.3 */
  PantoServerLog server_log;                  /* since ABI 1.3 */
  PantoMcpSamplingRequest mcp_sampling_request;       /* since ABI 1.3 */
  PantoMcpElicitationRequest mcp_elicitation_request; /* since ABI 1.3 */
  PantoProviderFallback provider_fallback;    /* since ABI 1.3 */
  uint64_t _reserved[32];
} PantoEventPayload;

/* An event, allocated by the caller (on the stack is fine). Set struct_size to
 * sizeof(PantoEvent) before the first call (PANTO_EVENT_INIT does); the library sets
 * every other field on every next call, and never changes struct_size.
 *
 * Lifetime: the strings an event points to are borrowed from its stream. They stay
 * valid until the next panto_next_event / panto_next_event_timeout / panto_next_events
 * call on that stream, or until panto_stream_free — whichever comes first (every event
 * of a panto_next_events batch alike). Copy what you need to keep. A copy of the struct
 * itself (assignment, memcpy) is fine while that lifetime lasts: nothing in it needs
 * freeing. */
typedef struct PantoEvent {
  uint32_t struct_size;  /* set by the caller: sizeof(PantoEvent) */
  uint32_t kind;         /* PANTO_EV_* */
  uint32_t flags;        /* reserved, 0 */
  uint32_t _private_gen; /* the library's; do not touch (was _reserved0 before 1.1.1) */
  const void *_private;  /* the library's; do not touch */
  PantoEventPayload payload; /* the arm named after `kind` */
} PantoEvent;

/* An initializer that sets struct_size and zeroes the rest. C99 and later, C++98 and
 * later: the C++ form names no nullptr and no empty braces, and spells out the payload's
 * first arm so that -Wmissing-field-initializers has nothing to say. */
#ifdef __cplusplus
#define PANTO_EVENT_INIT                                                               \
  {static_cast<uint32_t>(sizeof(PantoEvent)), 0, 0, 0, 0, {{0, 0, {0, 0}, {0, 0}, 0}}}
#else
#define PANTO_EVENT_INIT {.struct_size = (uint32_t)sizeof(PantoEvent)}
#endif

/* ---------------------------------------------------------------------------------- */
/* Version                                                                             */
/* ---------------------------------------------------------------------------------- */

/* The ABI version of the loaded library, (major << 16) | minor; compare with
 * PANTO_ABI_VERSION. Never fails, never blocks; any thread. */
PANTO_API uint32_t panto_abi_version(void);

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                              */
/*                                                                                     */
/* A PantoError is immutable: its accessors may be called from any thread, at once.     */
/* Every accessor accepts NULL (0, false or an empty/absent string). Returned views are */
/* borrowed from the error: valid until panto_error_free.                               */
/* ---------------------------------------------------------------------------------- */

/* The kind, PANTO_ERR_*. */
PANTO_API uint32_t panto_error_kind(const PantoError *err);

/* The message (one or more lines; names the function or configuration key at fault). */
PANTO_API PantoStr panto_error_message(const PantoError *err);

/* The HTTP status behind the error, 0 if none. */
PANTO_API uint32_t panto_error_status(const PantoError *err);

/* Whether repeating the same request could succeed. */
PANTO_API bool panto_error_retryable(const PantoError *err);

/* The provider's own error type or code; absent (ptr NULL) if it sent none. */
PANTO_API PantoStr panto_error_provider_code(const PantoError *err);

/* The canonical JSON: {"type":"error","kind":…,"message":…,"status":…,"retryable":…,
 * "provider_code":…}, with "output" (a string) when the error has one — the line
 * `panto run --json` ends with on a failure. */
PANTO_API PantoStr panto_error_to_json(const PantoError *err);

/* Frees the error. NULL is a no-op. */
PANTO_API void panto_error_free(PantoError *err);

/* The canonical name of an error kind ("config", "rate_limited", …); "unknown" for a
 * code this library does not know. Static storage: valid forever. */
PANTO_API PantoStr panto_error_kind_name(uint32_t kind);

/* The canonical type name of an event kind ("message_start", …, "error"); "unknown" for
 * PANTO_EV_NONE and codes this library does not know. Static storage: valid forever. */
PANTO_API PantoStr panto_event_kind_name(uint32_t kind);

/* ---------------------------------------------------------------------------------- */
/* Agents                                                                              */
/* ---------------------------------------------------------------------------------- */

/* Creates an agent from its JSON configuration (`len` bytes of UTF-8 at config_json):
 *   {"provider": "openai" | "anthropic" | "gemini", "model": "…", "base_url": "…",
 *    "api_key": "…", "system": "…", "max_tokens": n, "temperature": x,
 *    "tools": [{"name": "…", "description": "…", "parameters": {JSON Schema},
 *               "needs_approval": bool, "external": bool}],
 *    "max_steps": n, "tool_concurrency": n, "tool_timeout_ms": n,
 *    "retry": {"max_retries": n, "initial_delay_ms": n, "max_delay_ms": n,
 *              "max_elapsed_ms": n},
 *    "timeouts": {"connect_ms": n, "idle_ms": n, "request_ms": n},
 *    "queue_capacity": n, "headers": {"name": "value"},
 *    "max_event_bytes": n, "max_message_bytes": n, "max_tool_output_bytes": n,
 *    "max_input_bytes": n, "max_history_bytes": n,
 *    "reasoning": {"effort": "none" | "low" | "medium" | "high", "budget_tokens": n},
 *    "prompt_caching": true | false,
 *    "compaction": {"threshold_tokens": n, "keep_last": n, "model": "…", "prompt": "…"},
 *    "compat": "auto" | "openai" | "deepseek" | "ollama" | "vllm" | "generic"}
 * Every key is optional. "base_url" is the one of the provider's official SDK (OpenAI's
 * includes /v1). "api_key" defaults to $OPENAI_API_KEY / $ANTHROPIC_API_KEY /
 * $GEMINI_API_KEY. The tools
 * listed here are host tools: the caller implements them (see tool_call_start).
 * From ABI 1.3 on, a host tool with "needs_approval": true does not run when the model
 * calls it: the turn pauses (stop reason "deferred", see Durable turns) and, once
 * approved on panto_agent_resume, the call arrives as tool_call_start with host set as
 * usual. One with "external": true is never answered on the stream: its result is
 * given on panto_agent_resume. Both at once are PANTO_ERR_CONFIG.
 * Unknown keys and wrong types fail with PANTO_ERR_CONFIG naming the key.
 * Limits: "max_input_bytes" (default 4 MiB) caps one turn's input, "max_history_bytes"
 * (default 32 MiB) the conversation measured as its saved JSON; past either, the call
 * that would start the turn or load the history fails with PANTO_ERR_CONFIG naming the
 * key, and nothing is sent or kept. The events and messages of a turn are capped by
 * "max_event_bytes", "max_message_bytes" and "max_tool_output_bytes".
 * On success *out is a new agent, owned by the caller (panto_agent_free).
 * Does not block on the network (nothing is sent before the first turn). Any thread. */
PANTO_API PantoStatus panto_agent_new(const char *config_json, size_t len, PantoAgent **out,
                                      PantoError **err);

/* Frees the agent handle. Its open streams stay valid and keep the conversation alive
 * until they are freed. NULL is a no-op. Must not race another call on this agent. */
PANTO_API void panto_agent_free(PantoAgent *agent);

/* Saves the conversation (complete messages only) as versioned JSON,
 * {"version":1,"messages":[…]}, into *out, which the caller owns and frees with
 * panto_string_free. Allowed during a turn (it shows the last complete step). Never
 * blocks for long; any thread. */
PANTO_API PantoStatus panto_agent_save_history(PantoAgent *agent, PantoString *out,
                                               PantoError **err);

/* Replaces the conversation with a saved one (validated: a history the provider would
 * refuse, or one larger than max_history_bytes, is PANTO_ERR_CONFIG). PANTO_ERR_BUSY while a stream of this agent is open.
 * Never blocks for long; any thread. */
PANTO_API PantoStatus panto_agent_load_history(PantoAgent *agent, const char *json, size_t len,
                                               PantoError **err);

/* Empties the conversation. PANTO_ERR_BUSY while a stream of this agent is open. */
PANTO_API PantoStatus panto_agent_clear_history(PantoAgent *agent, PantoError **err);

/* Starts a turn: appends `input` (`len` bytes of UTF-8) as the user message and stores
 * its stream in *out, owned by the caller (panto_stream_free). Returns at once: the
 * request is sent on the library's worker threads. An agent has at most one open
 * stream: while one is open (until it is freed, or has delivered message_complete or
 * an error), this fails with PANTO_ERR_BUSY, synchronously. An input larger than
 * max_input_bytes, or one that would take the conversation past max_history_bytes, fails
 * with PANTO_ERR_CONFIG, synchronously, and nothing is sent. Any thread. */
PANTO_API PantoStatus panto_agent_stream(PantoAgent *agent, const char *input, size_t len,
                                         PantoStream **out, PantoError **err);

/* Since ABI 1.1. panto_agent_stream with per-turn options: `options_json` (UTF-8,
 * `options_len` bytes) is {"model": "…", "reasoning": {"effort": "…", "budget_tokens": n},
 * "defer_tools": bool, "input": […]}, every key optional, replacing the configuration's
 * for this turn only; NULL means no options. "defer_tools" (since ABI 1.3) pauses the
 * turn at every tool call instead of running it (reason "deferred"; see Durable turns),
 * for engines that run each call as a step of their own. "traceparent" (since ABI 1.3)
 * is the caller's span as W3C Trace Context writes it ("00-<32 hex trace id>-<16 hex
 * span id>-<2 hex flags>"): with panto_telemetry_export on, the turn's invoke_agent span
 * is its child. Unknown keys and wrong types are PANTO_ERR_CONFIG naming the key.
 * Otherwise exactly panto_agent_stream.
 *
 * "input" is the turn's input as text and attachments (then `input` must be empty, len
 * 0): a string, or an array of parts in the order the model reads them, each a string
 * (text) or {"type": "text", "text": "…"} or {"type": "image" | "document", and one of
 * "url": "https://…", "data": "<base64>", "path": "file to read"; optional "media_type"
 * (image/png, image/jpeg, image/gif, image/webp; application/pdf), sniffed from the
 * bytes when absent, and "name"}. For example
 *   {"input": ["What is in this picture?", {"type": "image", "path": "cat.png"}]}
 * A part of no known type, an unreadable path or one that is not a regular file (a
 * FIFO, a device: the message names it), an attachment larger than max_message_bytes,
 * or a PDF by URL for provider openai is PANTO_ERR_CONFIG, synchronously, and nothing is
 * sent. A "path" is read during this call, at most max_message_bytes + 1 bytes of it
 * (whatever its size on disk says); a FIFO is refused without waiting for a writer. */
PANTO_API PantoStatus panto_agent_stream_with(PantoAgent *agent, const char *input, size_t len,
                                              const char *options_json, size_t options_len,
                                              PantoStream **out, PantoError **err);

/* Since ABI 1.1. Summarizes the older part of the conversation into one synthetic
 * exchange with the agent's provider, keeping the last messages verbatim (a tool call
 * and its results are never separated). `options_json` (NULL: defaults) is
 * {"keep_last": n (default 6), "model": "…", "prompt": "…"}. On success *out (owned by
 * the caller, panto_string_free) is {"changed": bool, "messages_before": n,
 * "messages_after": n, "tokens_before": n, "tokens_after": n}. On failure the
 * conversation is untouched. BLOCKS for the provider's answer (bounded by the timeouts);
 * PANTO_ERR_BUSY while a stream of this agent, or another compaction, is running. Any
 * thread.
 * `cancel` (NULL: not cancellable) is borrowed for the call: panto_cancel_token_cancel
 * from another thread makes the call return promptly with PANTO_ERR_CANCELLED (its
 * request is dropped, the conversation untouched). A token already cancelled fails at
 * once, sending nothing. The token must outlive the call. */
PANTO_API PantoStatus panto_agent_compact(PantoAgent *agent, const char *options_json,
                                          size_t options_len, const PantoCancelToken *cancel,
                                          PantoString *out, PantoError **err);

/* Since ABI 1.3. Calls one tool of the agent's MCP servers ("mcp_servers") outside a
 * turn, for an engine that runs each tool call as its own step: a turn paused with
 * "defer_tools", whose call is then answered (panto_agent_resume) with this result.
 * `name` (`name_len` bytes of UTF-8) is the tool's name as the model sees it (with the
 * server's prefix, e.g. "fx__echo"); `arguments_json` (`arguments_len` bytes; NULL with
 * length 0: {}) is a JSON object. The servers are started if they were not. On success
 * *out (owned by the caller, panto_string_free) is {"output": "…", "is_error": bool,
 * "parts"?: […]}, exactly the form of an answer's result; the tool's own failure (its
 * error result, a timeout, a crashed server) is such a result with "is_error": true, and
 * the agent's secrets are redacted from it. PANTO_ERR_CONFIG when no MCP server of the
 * agent has that tool or the arguments are not a JSON object; a server that cannot start
 * fails as in a turn. The conversation is untouched and no turn is reserved: calls may
 * run at the same time as each other and as a stream of the agent. BLOCKS until the
 * server answers (bounded by the server's "timeout_ms"). Any thread but a callback of
 * panto's (PANTO_ERR_CONFIG there).
 * `cancel` (NULL: not cancellable) is borrowed for the call: panto_cancel_token_cancel
 * from another thread makes the call return promptly with PANTO_ERR_CANCELLED (the
 * server is sent its cancellation). A token already cancelled fails at once, sending
 * nothing. The token must outlive the call. */
PANTO_API PantoStatus panto_agent_call_mcp_tool(PantoAgent *agent, const char *name,
                                                size_t name_len, const char *arguments_json,
                                                size_t arguments_len,
                                                const PantoCancelToken *cancel,
                                                PantoString *out, PantoError **err);

/* Since ABI 1.3. How many tokens the request of a turn with `input` (UTF-8, `len`
 * bytes; NULL with len 0 is empty) would be now: the conversation, the tools, the system
 * prompt and the input. Nothing enters the conversation. On success *out (owned by the
 * caller, panto_string_free) is {"tokens": n, "estimated": bool}: the provider's count
 * where it has a count endpoint (anthropic, gemini, openai-responses), else an estimate
 * (estimated: true; nothing is sent). Errors are typed as a turn's (PANTO_ERR_CONFIG for
 * an input past max_input_bytes, the provider's kinds for its answer). BLOCKS for the
 * provider's answer (bounded by the timeouts); allowed during a turn. Any thread but a
 * panto callback's (PANTO_ERR_CONFIG there). */
PANTO_API PantoStatus panto_agent_count_tokens(PantoAgent *agent, const char *input, size_t len,
                                               PantoString *out, PantoError **err);

/* Since ABI 1.1. The transcript: a flat, provider-neutral JSON array of the
 * conversation, [{"role", "kind": "text"|"reasoning"|"tool_call"|"tool_result", "text",
 * "name"?, "call_id"?, "is_error"?}], into *out (owned by the caller,
 * panto_string_free). Allowed during a turn (it shows the last complete step). Never
 * blocks for long; any thread. */
PANTO_API PantoStatus panto_agent_transcript_json(PantoAgent *agent, PantoString *out,
                                                  PantoError **err);

/* ---------------------------------------------------------------------------------- */
/* MCP resources and prompts (since ABI 1.3)                                           */
/*                                                                                     */
/* What the host asks the agent's MCP servers (the "mcp_servers" config key) outside a  */
/* turn. Each call starts the servers if they are not running (as a turn would),        */
/* BLOCKS until the server answers (each request bounded by the server's timeout_ms),   */
/* and on success puts JSON text into *out, owned by the caller (panto_string_free).    */
/* Any thread, also while a turn of the agent runs (the servers serve both). `server`   */
/* (UTF-8, `server_len` bytes) names a server of                                        */
/* the configuration; NULL means every server for the listings, and for a read or a     */
/* prompt the only server, else the one whose listing has the URI or prompt (none or    */
/* several: PANTO_ERR_CONFIG, name one). An agent without MCP servers, or an unknown     */
/* server, is PANTO_ERR_CONFIG. The server's own errors keep their meaning:             */
/* PANTO_ERR_NOT_FOUND for an unknown resource (JSON-RPC -32002) or a server without    */
/* the method, PANTO_ERR_BAD_REQUEST for bad arguments (-32602), PANTO_ERR_SERVER for   */
/* its internal error, PANTO_ERR_TIMEOUT past timeout_ms; secrets of the server's       */
/* declaration (header values, credential-like env values) never appear in an error.    */
/* `cancel` (NULL: not cancellable) is borrowed for the call: panto_cancel_token_cancel  */
/* from another thread makes it return promptly with PANTO_ERR_CANCELLED (the request   */
/* is withdrawn from the server with notifications/cancelled); a token already          */
/* cancelled fails at once, sending nothing. The token must outlive the call.           */
/* ---------------------------------------------------------------------------------- */

/* Since ABI 1.3. The resources the server lists (every page; NULL: every server's, in
 * the servers' order), as a JSON array of {"server", "uri", "name", "title"?,
 * "description"?, "mime_type"?, "size"?}. A server without resources lists none. */
PANTO_API PantoStatus panto_agent_mcp_resources(PantoAgent *agent, const char *server,
                                                size_t server_len,
                                                const PantoCancelToken *cancel,
                                                PantoString *out, PantoError **err);

/* Since ABI 1.3. Reads the resource `uri` (UTF-8, `uri_len` bytes; resources/read):
 * {"contents": [{"uri", "mime_type"?, "text": "…" | "blob": "<base64>", "part"}]}.
 * "part" is the content as a part of a turn's input ("input" of
 * panto_agent_stream_with), ready to attach: text as {"type": "text"} headed by
 * "[resource: URI]", a PNG, JPEG, GIF or WebP blob as {"type": "image"}, a PDF as
 * {"type": "document"}, other bytes as a text part naming their type and size. */
PANTO_API PantoStatus panto_agent_mcp_read_resource(PantoAgent *agent, const char *server,
                                                    size_t server_len, const char *uri,
                                                    size_t uri_len,
                                                    const PantoCancelToken *cancel,
                                                    PantoString *out, PantoError **err);

/* Since ABI 1.3. The prompts the server lists (NULL: every server's), as a JSON array
 * of {"server", "name", "title"?, "description"?, "arguments": [{"name",
 * "description"?, "required": bool}]}. A server without prompts lists none. */
PANTO_API PantoStatus panto_agent_mcp_prompts(PantoAgent *agent, const char *server,
                                              size_t server_len, const PantoCancelToken *cancel,
                                              PantoString *out, PantoError **err);

/* Since ABI 1.3. The prompt `name` (UTF-8, `name_len` bytes) filled in with
 * `arguments_json` (a JSON object of strings, {"lang": "rust"}; NULL: none; anything
 * else is PANTO_ERR_CONFIG with nothing sent) — prompts/get —, as {"description"?,
 * "messages": [{"role": "user" | "assistant", "content": [parts]}]}, the parts in the
 * form of a turn's "input" (text, images, documents; other content as text naming it). */
PANTO_API PantoStatus panto_agent_mcp_get_prompt(PantoAgent *agent, const char *server,
                                                 size_t server_len, const char *name,
                                                 size_t name_len, const char *arguments_json,
                                                 size_t arguments_len,
                                                 const PantoCancelToken *cancel,
                                                 PantoString *out, PantoError **err);

/* ---------------------------------------------------------------------------------- */
/* Cancel tokens (since ABI 1.1)                                                        */
/*                                                                                     */
/* A stream is cancelled through its handle. A blocking call such as                   */
/* panto_agent_compact has no handle until it returns, so the caller makes a token      */
/* first, passes it to the call, and cancels the token from another thread. Because the */
/* token exists before the call starts, a cancel that races the call's start is never   */
/* lost: the call sees the token cancelled and fails at once.                           */
/* ---------------------------------------------------------------------------------- */

/* Since ABI 1.1. A new, uncancelled token, owned by the caller
 * (panto_cancel_token_free). NULL only if the library failed internally. Never blocks;
 * any thread. */
PANTO_API PantoCancelToken *panto_cancel_token_new(void);

/* Since ABI 1.1. Cancels the token, for good: every call using it, now or later, fails
 * with PANTO_ERR_CANCELLED (a call that already succeeded is not undone). One token may
 * serve several calls at once (they are all cancelled together). Idempotent; never
 * blocks; any thread, at any time, also while a call blocks on the token. PANTO_ERROR
 * for a NULL token. */
PANTO_API PantoStatus panto_cancel_token_cancel(const PantoCancelToken *token);

/* Since ABI 1.1. Whether the token was cancelled; false for NULL. Never blocks; any
 * thread. */
PANTO_API bool panto_cancel_token_is_cancelled(const PantoCancelToken *token);

/* Since ABI 1.1. Frees the token. Must not race a call that uses it (free it after that
 * call returned). NULL is a no-op. */
PANTO_API void panto_cancel_token_free(PantoCancelToken *token);

/* ---------------------------------------------------------------------------------- */
/* Streams                                                                             */
/* ---------------------------------------------------------------------------------- */

/* Blocks until the next event of the turn, its end, or a failure:
 *   PANTO_EVENT: *out holds an event (kind PANTO_EV_*, payload arm of that name);
 *   PANTO_DONE:  the stream is exhausted (message_complete was delivered); kind is
 *                PANTO_EV_NONE. Every later call returns PANTO_DONE again;
 *   PANTO_ERROR: the turn failed: kind is PANTO_EV_ERROR and payload.error holds the
 *                failure. Every later call returns the same kind again.
 * Before anything else, out->struct_size is checked: if `out` is NULL or struct_size is
 * not the size of a released PantoEvent (PANTO_EVENT_SIZE_1_0), this returns
 * PANTO_ERROR and writes nothing (the stream is not touched). A NULL stream is
 * PANTO_ERROR with a PANTO_ERR_CONFIG payload.
 * The previous event's strings become invalid when this is called. Blocks; wakes up for
 * panto_stream_cancel from another thread. One thread at a time per stream: a call while
 * another thread is inside one waits for that call to return, then returns PANTO_ERROR
 * with kind PANTO_ERR_BUSY (not sticky, nothing consumed; see Threads). */
PANTO_API PantoStatus panto_next_event(PantoStream *stream, PantoEvent *out);

/* Like panto_next_event, but waits at most timeout_ms milliseconds, then returns
 * PANTO_PENDING (kind PANTO_EV_NONE; the stream goes on). 0 does not wait at all (it
 * returns what is ready); a negative timeout waits without limit. While another thread
 * is inside a next call, the wait for it is bounded by the timeout too (PANTO_ERR_BUSY
 * at once for 0). */
PANTO_API PantoStatus panto_next_event_timeout(PantoStream *stream, PantoEvent *out,
                                               int32_t timeout_ms);

/* Since ABI 1.3. The most events one panto_next_events call fills. */
#define PANTO_NEXT_EVENTS_MAX 64

/* Since ABI 1.3. Takes several events in one call, and says whether to call again at
 * once: for bindings and event loops that would otherwise pay a call per event and one
 * more per burst to learn that nothing is left.
 *
 * `events` is an array of `capacity` PantoEvents (capacity >= 1); events[0].struct_size
 * is set as for panto_next_event, and every element is that size (the library reads
 * only events[0].struct_size, and writes it into each element it fills). The first
 * answer comes as panto_next_event_timeout(stream, &events[0], timeout_ms) gives it:
 *   PANTO_EVENT:   events[0..*filled) hold events, in order; *filled >= 1 and at most
 *                  min(capacity, PANTO_NEXT_EVENTS_MAX). After the first, only events
 *                  ready without waiting are taken. *more is true when the next call
 *                  would answer at once (more events are ready, or the stream's end or
 *                  failure is: a batch never holds PANTO_DONE or an error after its
 *                  events; the next call returns it), false when nothing is ready now.
 *                  After false, as after PANTO_PENDING, the stream's readiness
 *                  descriptor or ready set reports the next arrival (see Readiness), so
 *                  a caller may go straight to waiting there;
 *   PANTO_DONE, PANTO_ERROR, PANTO_PENDING: as panto_next_event_timeout, in events[0];
 *                  *filled is 0, *more false.
 * A cancel wins over events not yet delivered, as for panto_next_event: the call after
 * panto_stream_cancel returns PANTO_ERROR (PANTO_ERR_CANCELLED), whatever was ready.
 * PANTO_ERROR without writing any event if `filled` or `more` is NULL, capacity is 0,
 * or events[0] is not a PantoEvent (as panto_next_event's `out`); *filled and *more
 * are written first whenever they are not NULL.
 *
 * Lifetime: every event of the batch stays valid (strings, panto_event_to_json) until
 * the next next call of any kind on the stream, or panto_stream_free — the same rule as
 * a single event's. Blocking, threads and PANTO_ERR_BUSY as for
 * panto_next_event_timeout; it is a next call like the others. */
PANTO_API PantoStatus panto_next_events(PantoStream *stream, PantoEvent *events,
                                        size_t capacity, int32_t timeout_ms, size_t *filled,
                                        bool *more);

/* The canonical JSON of a delivered event, {"type":"<snake_case>",…fields} — byte for
 * byte the line `panto run --json` prints for it — or, for a PANTO_EV_ERROR event, the
 * error's JSON (see panto_error_to_json). *out is borrowed like the event's strings.
 * PANTO_ERROR (and *out absent) if `event` is NULL, has no event (PANTO_EV_NONE), was
 * not filled by a next call, is a copy of an event the stream has since moved past (a
 * later next call was made on it: its lifetime is over), or `out` is NULL. An event no
 * next call has filled must be zero-initialized (PANTO_EVENT_INIT): its _private field
 * is read. Never blocks. It may be called from any thread while the event's lifetime
 * lasts. */
PANTO_API PantoStatus panto_event_to_json(const PantoEvent *event, PantoStr *out);

/* Cancels the turn: a next call blocked on another thread wakes up, and it — or the
 * next one — fails with PANTO_ERR_CANCELLED, unless message_complete was already
 * delivered. The history keeps only complete steps. Idempotent; never blocks; may be
 * called from any thread at any time (not after panto_stream_free). PANTO_ERROR for a
 * NULL stream. */
PANTO_API PantoStatus panto_stream_cancel(PantoStream *stream);

/* Answers the host-tool call `call_id` (from a tool_call_start with host set) with
 * `output`, an error result if is_error. An id that is not waiting for a result
 * (unknown, already answered, or given up after tool_timeout_ms) is PANTO_ERR_TOOL;
 * the stream goes on unaffected. NULL output with output_len 0 is an empty output.
 * Never blocks; any thread, also while another thread is in a next call. */
PANTO_API PantoStatus panto_stream_submit_tool_result(PantoStream *stream, const char *call_id,
                                                      size_t call_id_len, const char *output,
                                                      size_t output_len, bool is_error,
                                                      PantoError **err);

/* Since ABI 1.2. panto_stream_submit_tool_result with a result of text and image parts:
 * `parts_json` (UTF-8, `parts_len` bytes, not NULL) is a JSON array in the form of
 * panto_agent_stream_with's "input", without documents: each part a string (text),
 * {"type": "text", "text": "…"} or {"type": "image", and one of "url", "data"
 * (base64) or "path" (a file, read during this call); optional "media_type"
 * (image/png, image/jpeg, image/gif, image/webp; sniffed from the bytes when absent)
 * and "name"}. For example
 *   [{"type": "text", "text": "The chart:"}, {"type": "image", "path": "chart.png"}]
 * The model reads the text parts joined by newlines (tool_result's `output`) and sees
 * the images (Anthropic inside the tool_result; OpenAI chat in a user message right
 * after the tool messages); tool_result's `parts` carries them. An image larger than
 * max_message_bytes is replaced by a note saying so. Bad JSON, a part of no known or
 * allowed type (a document, a PDF given as an image), an unreadable path, one that is
 * not a regular file (a FIFO, a device) or a file larger than max_message_bytes (the
 * message names it; at most max_message_bytes + 1 bytes are read) and an id that is not
 * waiting for a result are PANTO_ERR_TOOL, and the call stays unanswered. Never blocks
 * beyond reading the files; any thread, also while another thread is in a next call. */
PANTO_API PantoStatus panto_stream_submit_tool_result_parts(PantoStream *stream,
                                                            const char *call_id,
                                                            size_t call_id_len,
                                                            const char *parts_json,
                                                            size_t parts_len, bool is_error,
                                                            PantoError **err);

/* Diagnostics: true while a next call on this stream is waiting for an event (blocked,
 * or about to block). For tests and monitoring; false for NULL. Any thread. */
PANTO_API bool panto_stream_consumer_waiting(const PantoStream *stream);

/* Diagnostics: true while the turn is paused because the consumer has not taken its
 * events (the queue is full, the network is not being read). False for NULL. */
PANTO_API bool panto_stream_turn_paused(const PantoStream *stream);

/* Since ABI 1.1. The stream's readiness descriptor, for poll(), epoll, select(), kqueue
 * or an event loop (Go's netpoller, asyncio's add_reader, libuv, …): *fd_out is a file
 * descriptor that is readable exactly while panto_next_event_timeout(stream, &ev, 0)
 * would not return PANTO_PENDING — an event, PANTO_DONE or PANTO_ERROR (a failure, a
 * cancel) is waiting to be taken. One waiting loop can thus serve any number of streams
 * on one thread, with no thread per stream.
 *
 * Level-triggered, with one rule for the caller:
 *   - It becomes readable when the library hands the turn's events over (in bursts: at
 *     the latest a fraction of a millisecond after the first of them was produced),
 *     when the turn ends or fails, and on panto_stream_cancel.
 *   - Drain until PANTO_PENDING: after each readiness, call
 *     panto_next_event_timeout(stream, &ev, 0) until it returns PANTO_PENDING (or
 *     PANTO_DONE / PANTO_ERROR). The call that finds nothing makes the descriptor
 *     unreadable again; until then it may stay readable even though the last ready event
 *     was taken. Stopping early is allowed (the descriptor then stays readable, so the
 *     next wait returns at once). With edge-triggered epoll (EPOLLET) the rule is a
 *     must: a wake-up comes only when the descriptor turns readable again. It is
 *     enough: PANTO_PENDING is never returned with the descriptor left readable (what
 *     arrived while the call looked is returned instead), so after a PANTO_PENDING the
 *     next hand-off turns it readable — an edge.
 *   - After PANTO_DONE or PANTO_ERROR it stays readable for good (every later call
 *     answers at once, the same way): stop waiting on it then.
 *   - The caller never reads, writes or closes it; the next calls do what it needs.
 * A blocking next call (panto_next_event, or a timeout other than 0) may be mixed with
 * waiting on the descriptor; the one-consumer rule of Threads holds as always.
 *
 * Ownership: the stream owns it. It is made on the first call (a stream nobody asks
 * pays nothing; every later call returns the same number), non-blocking and
 * close-on-exec — an eventfd on Linux and Android, the read end of a pipe elsewhere —
 * and closed by panto_stream_free, which first makes it readable: a poll() or select()
 * already waiting on it returns (with POLLIN, or POLLNVAL if it looked only after the
 * close). Remove it from an epoll set, a kqueue or an event loop before freeing the
 * stream (a closed descriptor leaves an epoll set silently, and a waiter that has not
 * yet seen the event may then never see it). Runtimes that take ownership of a
 * descriptor they are given (Go's os.NewFile closes its file) must be given a dup().
 *
 * Threads: any thread, any time, also while another thread is in a next call; never
 * blocks. Fork: the descriptor is inherited by a child (not across exec) and refers to
 * the same object as the parent's: a child must not wait on it (see Fork above).
 *
 * Returns PANTO_OK and the descriptor in *fd_out, or PANTO_ERROR with *fd_out = -1: a
 * NULL stream or fd_out (nothing written), a stream poisoned by an internal error, a
 * stream inherited from the parent process (in a forked child), no
 * descriptor to be had (the process has run out of file descriptors), or a platform
 * without POSIX descriptors (Windows, in this version). */
PANTO_API PantoStatus panto_stream_readiness_fd(const PantoStream *stream, int64_t *fd_out);

/* ---------------------------------------------------------------------------------- */
/* Ready sets (since ABI 1.2): one descriptor for many streams                         */
/*                                                                                     */
/* A stream's own readiness descriptor costs the process one descriptor per stream on  */
/* top of its socket, and an event loop one registration and one wake-up per stream.   */
/* A stream attached to a set instead reports to the set, under a token the caller     */
/* chose: the set's one descriptor is readable exactly while a reported stream's token */
/* waits to be taken. The loop waits on that descriptor, takes the tokens              */
/* (panto_ready_set_take), and drains each of those streams until PANTO_PENDING.       */
/*                                                                                     */
/* When a stream is reported: when it turns ready — what makes a stream's own          */
/* descriptor readable (events handed over, its end, a failure, a cancel) — after its   */
/* consumer last got PANTO_PENDING from it (or since it was attached). Once: until a    */
/* next call on it answers PANTO_PENDING again, it is not reported a second time. Hence */
/* the caller's one rule, as for a stream's own descriptor: after taking a token, call  */
/* panto_next_event_timeout(stream, &ev, 0) until PANTO_PENDING (or PANTO_DONE /         */
/* PANTO_ERROR, after which the stream is not reported again: it answers at once). A    */
/* stream not drained that far is not reported again — keep it on a list of your own.  */
/* It is edge-safe: PANTO_PENDING is never returned while something arrived unreported, */
/* so after it the next hand-off reports the stream, and a report of a set with nothing */
/* queued turns its descriptor readable (an edge for EPOLLET or Go's netpoller). A token */
/* may be reported for a stream that has nothing by then (its consumer drained it       */
/* meanwhile): the drain answers PANTO_PENDING at once. The set holds each stream at    */
/* most once. After panto_stream_free returns, the set never reports that stream's      */
/* token again (a token taken before is the caller's to ignore).                        */
/* ---------------------------------------------------------------------------------- */

/* Since ABI 1.2. A new, empty set, owned by the caller (panto_ready_set_free), with its
 * descriptor (non-blocking, close-on-exec: an eventfd on Linux and Android, a pipe's
 * read end elsewhere). PANTO_ERROR (and *out NULL) if `out` is NULL, the process is out
 * of descriptors, or on a platform without POSIX descriptors (Windows, in this
 * version). Any thread. */
PANTO_API PantoStatus panto_ready_set_new(PantoReadySet **out);

/* Since ABI 1.2. The set's descriptor, for poll(), epoll, select(), kqueue or an event
 * loop: readable exactly while a token waits to be taken (it may also be readable with
 * only freed streams' entries left; panto_ready_set_take then returns 0 and clears it).
 * The set owns it: never read, write or close it. PANTO_ERROR with *fd_out = -1 for a
 * NULL set or fd_out (nothing written then), and in a forked child for a set made
 * before the fork (see Fork). Never blocks; any thread. */
PANTO_API PantoStatus panto_ready_set_fd(const PantoReadySet *set, int64_t *fd_out);

/* Since ABI 1.2. Takes up to `cap` tokens of reported streams, oldest first, into
 * tokens[0..]; returns how many. When it returns fewer than `cap`, the set was emptied
 * and its descriptor is unreadable (until the next report); when it returns `cap`, call
 * it again before waiting. 0 for a NULL set or tokens, or a cap of 0. Never blocks; any
 * thread (concurrent calls each take different tokens). */
PANTO_API size_t panto_ready_set_take(const PantoReadySet *set, uint64_t *tokens, size_t cap);

/* Since ABI 1.2. Frees the set: its descriptor is made readable (a poll() already
 * waiting returns) and closed — remove it from an epoll set or event loop first.
 * Streams still attached keep working and are simply no longer reported; they may be
 * freed before or after the set. NULL is a no-op. Must not race another call on this
 * set. */
PANTO_API void panto_ready_set_free(PantoReadySet *set);

/* Since ABI 1.2. Makes `stream` report its readiness to `set` under `token` (any value
 * the caller likes: an index, a pointer) instead of through a descriptor of its own —
 * at once if it has something to report already. Once per stream: PANTO_ERROR if it
 * was attached before or panto_stream_readiness_fd was called on it (a stream reports
 * one way), and for a NULL stream or set, a poisoned stream, or a stream inherited from
 * the parent process (in a forked child). A stream may be attached to a set freed
 * later. Never blocks; any thread, also while another thread is in a next call. */
PANTO_API PantoStatus panto_stream_attach(const PantoStream *stream, const PantoReadySet *set,
                                          uint64_t token);

/* Frees the stream. If its turn is still running, cancels it and waits for it to stop,
 * which is prompt (a cancelled turn stops at its next wait; no network round trip is
 * awaited); its HTTP connection is closed. The last event's strings become invalid, and
 * its readiness descriptor, if one was asked for, is made readable and closed; a ready
 * set it is attached to never reports it again.
 * Safe from any thread, including finalizers. NULL is a no-op. Must not race another
 * call on this stream (cancel first, then let a blocked consumer return, then free). */
PANTO_API void panto_stream_free(PantoStream *stream);

/* ---------------------------------------------------------------------------------- */
/* Strings                                                                             */
/* ---------------------------------------------------------------------------------- */

/* Frees the string in *s and empties *s (ptr NULL, len 0), so freeing it again is a
 * no-op. NULL, and an empty PantoString, are no-ops. */
PANTO_API void panto_string_free(PantoString *s);

/* ---------------------------------------------------------------------------------- */
/* Durable turns (since ABI 1.3): checkpoints, resume, deferred calls, steering        */
/*                                                                                     */
/* A turn can outlive its stream, and its process. At every step boundary (its input   */
/* appended, each complete model response, each tool result, each steering message     */
/* delivered) the turn's state is a checkpoint: a versioned JSON document,             */
/* {"panto_checkpoint": 1, …}, holding the conversation with this turn's input, the    */
/* step count, the usage so far, the turn's options and the calls of the current step  */
/* with the results they have. It holds no API key, header value or MCP secret, but it */
/* holds attachments by value (an image of the input is in it as base64), so it is as  */
/* large as the turn's conversation. A library reads the checkpoints of its own and     */
/* every older version; a checkpoint from a newer library is refused.                   */
/*                                                                                     */
/* panto_agent_resume continues a checkpoint's turn on any agent with the same tools,   */
/* in any process: a model response the checkpoint holds is never requested again; a   */
/* call with no result in it runs again (tools are at-least-once: make them idempotent, */
/* or defer them). The resumed stream keeps the stream contract, and its               */
/* message_complete reports the whole turn (the usage and messages of every step).      */
/*                                                                                     */
/* Deferred calls. A call of a tool with "needs_approval" or "external" (configuration  */
/* "tools"), or any call under the turn option "defer_tools", waits for an answer from  */
/* outside. When every other call of the step has its result, the turn pauses: the      */
/* stream ends with message_complete, stop_reason "deferred" and the calls in           */
/* `deferred`, then PANTO_DONE. The agent's history then holds the turn up to the step  */
/* (valid for the provider: the pending calls are answered in it with a note that they  */
/* wait); a new turn on the agent starts from there, and the paused turn is continued   */
/* only by resuming its checkpoint. Answers are given to panto_agent_resume.            */
/*                                                                                     */
/* Steering. panto_stream_steer queues a user message into a running turn, from any     */
/* thread; it is delivered at the next step boundary (PANTO_EV_STEERING_DELIVERED).     */
/* Messages the turn did not deliver because it ended first (it failed, was cancelled, */
/* paused or reached a limit) are returned by panto_stream_take_undelivered, never      */
/* dropped silently.                                                                   */
/* ---------------------------------------------------------------------------------- */

/* Since ABI 1.3. The turn at its latest step boundary, as checkpoint JSON text into
 * *out, owned by the caller (panto_string_free). Ordering: once a next call has
 * delivered the tool_result of a call, or the first event after a response's
 * message_end, the checkpoint includes that result or that response; so a checkpoint
 * taken after message_complete is the finished (or paused) turn.
 * Returns PANTO_OK; PANTO_PENDING (not an error: *out empty, *err NULL) when the turn
 * has no checkpoint yet (it has not started on its worker thread); PANTO_ERROR for a
 * NULL stream or out (PANTO_ERR_CONFIG), a poisoned stream (PANTO_ERR_INTERNAL) or a
 * stream inherited from the parent process (PANTO_ERR_CONFIG, see Fork). Still
 * available after the stream ended, failed or was cancelled (the last boundary it
 * reached). Never blocks for long (it serializes the document); any thread, also while
 * another thread is in a next call. */
PANTO_API PantoStatus panto_stream_checkpoint(const PantoStream *stream, PantoString *out,
                                              PantoError **err);

/* Since ABI 1.3. Continues the turn a checkpoint holds, as a new stream of `agent`
 * stored in *out (owned by the caller, panto_stream_free). `checkpoint_json` (UTF-8,
 * `checkpoint_len` bytes, not NULL) is a document panto_stream_checkpoint returned, in
 * this process or another. `answers_json` (NULL or empty: no answers) answers deferred
 * calls, an object by call id, each value one of
 *   {"approve": true}                      run it (approval, or "defer_tools")
 *   {"reject": "reason"}                   do not run it: the model reads an error
 *                                          result saying it was rejected, and why
 *   {"output": "text", "is_error": bool,   its result (external, or "defer_tools");
 *    "parts": [text and image blocks]}     "is_error" and "parts" optional
 * for example {"call_1": {"approve": true}, "call_2": {"output": "42"}}. A deferred call
 * left unanswered stays deferred: the turn pauses again.
 * The agent's history becomes the checkpoint's conversation (whatever it held), then
 * grows as the turn goes on: afterwards it equals what an uninterrupted turn would have
 * left. Returns at once, like panto_agent_stream (the turn runs on the worker threads);
 * PANTO_ERR_BUSY, synchronously, while a stream of this agent is open.
 * PANTO_ERR_CONFIG, synchronously, with a message naming the problem, and nothing sent
 * and the history unchanged, for: a checkpoint that is not JSON, not a checkpoint,
 * truncated, of a newer version, larger than 64 MiB, or inconsistent (a conversation a
 * provider would refuse, results for calls the step did not make); answers that are not
 * JSON or not of the form above, an answer to a call that is not deferred, an approval
 * of an external call or a result for one that needs approval; a checkpoint past this
 * agent's max_steps or output_retries. A checkpoint naming a tool this agent lacks fails
 * the stream's first next call with PANTO_ERR_CONFIG (an MCP server's tools are known
 * only once it started). Any thread. */
PANTO_API PantoStatus panto_agent_resume(PantoAgent *agent, const char *checkpoint_json,
                                         size_t checkpoint_len, const char *answers_json,
                                         size_t answers_len, PantoStream **out,
                                         PantoError **err);

/* Since ABI 1.3. Queues a user message into the running turn. The input is text
 * (`input`, `len` bytes of UTF-8) or, with `input_json` non-NULL (then `input` must be
 * empty), the form of panto_agent_stream_with's "input": a string, or an array of text,
 * image and document parts (`input_json_len` bytes; a "path" is read during this call).
 * It is delivered at the next step boundary — after the current step's tool results,
 * before the next request — with a PANTO_EV_STEERING_DELIVERED event; if the model's
 * message would have ended the turn, the turn goes on so that the model answers it.
 * Returns PANTO_OK once queued. PANTO_ERROR with PANTO_ERR_CONFIG once the turn has
 * ended (message_complete, a failure, a cancel), for bad JSON or parts (the message
 * names them), and for a NULL stream or a stream inherited from the parent process;
 * PANTO_ERR_INTERNAL for a poisoned stream. The input is borrowed for the call only:
 * whatever the result, it stays the caller's. Never blocks (beyond reading files); any
 * thread, also while another thread is in a next call. */
PANTO_API PantoStatus panto_stream_steer(PantoStream *stream, const char *input, size_t len,
                                         const char *input_json, size_t input_json_len,
                                         PantoError **err);

/* Since ABI 1.3. The messages panto_stream_steer queued that the turn did not deliver
 * because it ended first (it failed, was cancelled, paused or reached max_steps),
 * oldest first, into *out (owned by the caller, panto_string_free): a JSON array with
 * one array of parts per message, in the saved history's block form, e.g.
 *   [[{"type": "text", "text": "also check Rome"}]]
 * Each message is given once: a second call returns []. While the turn runs it returns
 * [] (a queued message may still be delivered). PANTO_ERROR as for
 * panto_stream_checkpoint. Never blocks; any thread. */
PANTO_API PantoStatus panto_stream_take_undelivered(PantoStream *stream, PantoString *out,
                                                    PantoError **err);

/* ---------------------------------------------------------------------------------- */
/* MCP OAuth (since ABI 1.3)                                                           */
/*                                                                                     */
/* A Streamable HTTP MCP server whose configuration has "oauth" (docs/mcp.md) is signed */
/* in to with OAuth 2.1 when it asks: client credentials need nothing more; the         */
/* authorization code grant needs someone to open an authorization URL (open_url). The  */
/* tokens live as long as the agent's servers unless the host keeps them (load_tokens, */
/* save_tokens): what is saved is the library's own JSON text, a secret, keyed by the  */
/* server's URL, to be handed back unchanged.                                          */
/*                                                                                     */
/* These callbacks (and the MCP client hooks below) are where the library calls into   */
/* the host: on the library's own threads (never the caller's), possibly several at    */
/* once, while a turn starts an MCP server or renews its token. They may block (a      */
/* file, a prompt). Every string they get is valid during the call only, UTF-8, with   */
/* its length and a NUL after it. Host state they touch must be synchronized by the    */
/* host (a mutex), also where the host's own threads read it.                          */
/* ---------------------------------------------------------------------------------- */

/* The host's OAuth callbacks; any of them may be NULL.
 *   load_tokens  writes at most `cap` bytes of the text last saved for `server_url`
 *                into `buf` and returns its whole length (0: nothing saved); when that
 *                length is larger than `cap`, the library calls again with a buffer of
 *                that size. Texts over 1 MiB are ignored.
 *   save_tokens  keeps `tokens` for `server_url`, replacing what was there.
 *   open_url     opens (or shows) the authorization URL `url` for a person, and
 *                returns 0; anything else fails the sign-in (PANTO_ERR_AUTHENTICATION).
 *                The browser's redirect comes to a loopback listener of the library's,
 *                which waits at most 300 s.
 *   user_data    passed to every callback.
 *   free_user_data  called exactly once with user_data, on a thread of the library's,
 *                after the last callback returned and when none can run any more (the
 *                agent, its streams and its MCP servers are gone); NULL: not called. */
typedef struct PantoMcpOAuthHooks {
  size_t (*load_tokens)(void *user_data, const char *server_url, size_t server_url_len,
                        char *buf, size_t cap);
  void (*save_tokens)(void *user_data, const char *server_url, size_t server_url_len,
                      const char *tokens, size_t tokens_len);
  int (*open_url)(void *user_data, const char *url, size_t url_len);
  void *user_data;
  void (*free_user_data)(void *user_data);
} PantoMcpOAuthHooks;

/* Since ABI 1.3. Lends the OAuth of `agent`'s MCP servers the host's callbacks
 * (`hooks` is copied; the callbacks and user_data must stay usable until
 * free_user_data). Call it before the agent's first turn: a server keeps the callbacks
 * it first started with. On PANTO_OK the library owns user_data (free_user_data);
 * on PANTO_ERROR it stays the caller's: PANTO_ERR_CONFIG for a NULL agent or hooks, or
 * an agent without MCP servers; PANTO_ERR_INTERNAL for a poisoned agent. Never blocks;
 * any thread. */
PANTO_API PantoStatus panto_agent_set_mcp_oauth(PantoAgent *agent,
                                                const PantoMcpOAuthHooks *hooks,
                                                PantoError **err);

/* ---------------------------------------------------------------------------------- */
/* MCP sampling and elicitation (since ABI 1.3)                                        */
/*                                                                                     */
/* An MCP server whose configuration enables "sampling" may ask the agent's model a    */
/* question (sampling/createMessage), one enabling "elicitation" may ask the host for  */
/* structured input (elicitation/create); docs/mcp.md. Each is reported by its event   */
/* (PANTO_EV_MCP_SAMPLING_REQUEST, PANTO_EV_MCP_ELICITATION_REQUEST) with its outcome. */
/* Without hooks every enabled sampling request is answered and every elicitation      */
/* declined; with them the host decides.                                               */
/*                                                                                     */
/* The callbacks run on the library's own threads (never the caller's; each call on a  */
/* thread of its own), possibly several at once, while a tool of that server runs in a */
/* turn. They may block (to ask a person); the server's tool call waits. Every string  */
/* they get is valid during the call only, UTF-8, with its length and a NUL after it.  */
/* Host state they touch must be synchronized by the host (a mutex), also where the    */
/* host's own threads read it.                                                         */
/*                                                                                     */
/* The requests are JSON objects, the same in every language:                          */
/*   sampling     {"server": name, "summary": the first line of the last message,      */
/*                 "max_tokens": the output limit (at most the server's                */
/*                 "sampling_max_tokens"), "system_prompt": string or null,            */
/*                 "temperature": number or null,                                      */
/*                 "messages": [{"role": "user" | "assistant", "text": string}]}       */
/*   elicitation  {"server": name, "message": what to tell the person,                 */
/*                 "requested_schema": the JSON Schema of the answer, an object of     */
/*                 flat properties}                                                    */
/* An elicitation's answer is {"action": "accept", "content": {...}} (an object        */
/* matching the requested schema), {"action": "decline"} or {"action": "cancel"}.      */
/* ---------------------------------------------------------------------------------- */

/* The host's answers; either callback may be NULL.
 *   approve_sampling  returns nonzero to let the agent's model answer the sampling
 *                request `request_json` (the request is counted in the turn's usage),
 *                0 to refuse it: the server gets a JSON-RPC error (code -1) and no model
 *                request is made. NULL: every request is answered.
 *   elicit       answers the elicitation `request_json`: writes the answer's JSON into
 *                `buf` (`cap` bytes, 1 MiB; no NUL needed) and returns its length. It is
 *                called once per elicitation. 0 declines; so does a length over `cap`,
 *                or an answer that is not UTF-8 or not an answer's JSON. An accepted
 *                content that does not match the requested schema is refused to the
 *                server as an error (the event's outcome is "invalid"). NULL: every
 *                elicitation is declined.
 *   user_data    passed to every callback.
 *   free_user_data  called exactly once with user_data, after the last callback
 *                returned and when none can run any more: the hooks were replaced (a
 *                later call) or the agent, its streams and its MCP servers are gone; on
 *                the thread that let go last. NULL: not called. */
typedef struct PantoMcpClientHooks {
  int (*approve_sampling)(void *user_data, const char *request_json, size_t request_json_len);
  size_t (*elicit)(void *user_data, const char *request_json, size_t request_json_len,
                   char *buf, size_t cap);
  void *user_data;
  void (*free_user_data)(void *user_data);
} PantoMcpClientHooks;

/* Since ABI 1.3. Lends `agent`'s MCP servers the host's answers to their sampling and
 * elicitation requests (`hooks` is copied; the callbacks and user_data must stay usable
 * until free_user_data). They are read at each request: a later call replaces them
 * (from the next request on). On PANTO_OK the library owns user_data (free_user_data);
 * on PANTO_ERROR it stays the caller's: PANTO_ERR_CONFIG for a NULL agent or hooks, or
 * an agent without MCP servers; PANTO_ERR_INTERNAL for a poisoned agent. Never blocks;
 * any thread. */
PANTO_API PantoStatus panto_agent_set_mcp_client_hooks(PantoAgent *agent,
                                                       const PantoMcpClientHooks *hooks,
                                                       PantoError **err);

/* ---------------------------------------------------------------------------------- */
/* Telemetry (since ABI 1.3)                                                           */
/*                                                                                     */
/* Every turn makes OpenTelemetry spans named as the GenAI semantic conventions say    */
/* (invoke_agent, chat {model}, execute_tool {tool}) and records their histograms      */
/* (gen_ai.client.operation.duration, gen_ai.client.token.usage,                       */
/* gen_ai.client.operation.time_to_first_chunk; docs/observability.md). A host opts in */
/* with panto_telemetry_export; they are then sent over OTLP/HTTP (protobuf) to the    */
/* collector the standard variables name: OTEL_EXPORTER_OTLP_ENDPOINT (the base URL;   */
/* /v1/traces and /v1/metrics are added) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /       */
/* OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (a signal's URL itself),                        */
/* OTEL_EXPORTER_OTLP_HEADERS (k=v,k2=v2, URL-encoded values; sent, never logged; or a */
/* signal's own), OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME,                       */
/* OTEL_RESOURCE_ATTRIBUTES; OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none   */
/* leaves that signal out, and OTEL_METRIC_EXPORT_INTERVAL (ms, default 60000) is how  */
/* often the metrics are sent. A turn's invoke_agent span is a child of the span named */
/* by the turn option "traceparent" (panto_agent_stream_with), else the root of a      */
/* trace of its own.                                                                   */
/*                                                                                     */
/* A turn never waits for the export: a finished span goes to a bounded queue (4096    */
/* spans; when it is full the span is dropped and counted) that one library thread     */
/* sends in batches; a metric is added to an in-memory histogram that the same thread  */
/* sends. That thread is detached and lives as long as the process: nothing needs      */
/* joining at exit. Spans still queued and metrics not yet sent at exit are lost: call */
/* panto_telemetry_flush before exiting. A child made by fork() has no export thread:  */
/* its spans are dropped (counted) and its flushes time out.                           */
/* ---------------------------------------------------------------------------------- */

/* Since ABI 1.3. Opts this process into exporting every turn's spans and metrics, when
 * OTEL_EXPORTER_OTLP_ENDPOINT or a signal's own endpoint variable is set (not empty; a
 * signal turned off with OTEL_*_EXPORTER=none does not count): then *exporting (NULL:
 * not written) is true. With none set, nothing happens, *exporting is false and the
 * call succeeds. `service_name` (UTF-8, `len` bytes; NULL
 * with len 0, or empty: "panto") is the resource's service.name unless
 * OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one. The variables are read once,
 * by the first call that starts the export; later calls change nothing and report it
 * running. PANTO_ERR_CONFIG when the variables are unusable, or when the process has a
 * Rust `tracing` subscriber already (a Rust host: bridge panto's spans with
 * tracing-opentelemetry instead); no error message holds a header's value. Starts the
 * export thread; never blocks for the network. Any thread. */
PANTO_API PantoStatus panto_telemetry_export(const char *service_name, size_t len,
                                             bool *exporting, PantoError **err);

/* Since ABI 1.3. Waits, at most `timeout_ms`, until every span that ended before the
 * call has been sent to the collector (or its sending failed), and the metrics recorded
 * before the call too. PANTO_OK when they were all handled in time (also when the
 * export is not running); PANTO_ERR_TIMEOUT when not. Either way *undelivered (NULL:
 * not written) is how many spans were lost since the export started: dropped with the
 * queue full, refused by the collector, or not sent (unreachable, timed out); a failed
 * metrics export is not counted there. BLOCKS up to `timeout_ms`. Any thread but a panto
 * callback's; call it before exiting. */
PANTO_API PantoStatus panto_telemetry_flush(uint32_t timeout_ms, uint64_t *undelivered,
                                            PantoError **err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PANTO_H */

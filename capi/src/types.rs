//! Owns the data layout of the ABI: every `#[repr(C)]` type and every constant that
//! `include/panto.h` declares. Nothing here has behaviour; the header is the manual, and
//! `scripts/check-header.sh` checks that this file and the header say the same thing.
//!
//! Layout rules kept by every type here (so that no byte is implicit padding, which the
//! library could leave undefined): fields are ordered from the largest alignment down or
//! padded by hand with `_reserved*` fields, which are always zero.

use std::ffi::{c_char, c_void};

/// Every call returns one of these; callers treat any other value as `PANTO_ERROR`.
pub type PantoStatus = i32;

pub const PANTO_OK: PantoStatus = 0;
pub const PANTO_EVENT: PantoStatus = 0;
pub const PANTO_DONE: PantoStatus = 1;
pub const PANTO_ERROR: PantoStatus = 2;
pub const PANTO_PENDING: PantoStatus = 3;

/// The ABI version; the crate's major.minor (checked by a test).
pub const PANTO_ABI_VERSION_MAJOR: u32 = 1;
pub const PANTO_ABI_VERSION_MINOR: u32 = 3;

/// `PantoEvent::kind` when the call delivered no event (`PANTO_DONE`, `PANTO_PENDING`).
pub const PANTO_EV_NONE: u32 = 0;
// The core's `Event::code()`, in the order of `Event::TYPES` (checked by a test).
pub const PANTO_EV_MESSAGE_START: u32 = 1;
pub const PANTO_EV_BLOCK_START: u32 = 2;
pub const PANTO_EV_CONTENT_DELTA: u32 = 3;
pub const PANTO_EV_TOOL_DETAILS: u32 = 4;
pub const PANTO_EV_BLOCK_COMPLETE: u32 = 5;
pub const PANTO_EV_MESSAGE_END: u32 = 6;
pub const PANTO_EV_TOOL_CALL_START: u32 = 7;
pub const PANTO_EV_TOOL_RESULT: u32 = 8;
pub const PANTO_EV_PROVIDER_RETRY: u32 = 9;
pub const PANTO_EV_MESSAGE_COMPLETE: u32 = 10;
/// Since ABI 1.1.
pub const PANTO_EV_HISTORY_COMPACTED: u32 = 11;
/// Added after ABI 1.1.0 (structured output).
pub const PANTO_EV_OUTPUT_REPAIR: u32 = 12;
/// Durable turns: a steered message was delivered.
pub const PANTO_EV_STEERING_DELIVERED: u32 = 13;
/// Progress of a running tool call.
pub const PANTO_EV_TOOL_PROGRESS: u32 = 14;
/// A log line of an MCP server.
pub const PANTO_EV_SERVER_LOG: u32 = 15;
/// An MCP server's sampling request was settled.
pub const PANTO_EV_MCP_SAMPLING_REQUEST: u32 = 16;
/// An MCP server's elicitation was settled.
pub const PANTO_EV_MCP_ELICITATION_REQUEST: u32 = 17;
/// Since ABI 1.3 (fallback models); 16 and 17 are taken by other events of 1.3.
pub const PANTO_EV_PROVIDER_FALLBACK: u32 = 18;
/// `PantoEvent::kind` with `PANTO_ERROR`: the payload is the failure. Far above the
/// core's event codes, so new event types never collide with it.
pub const PANTO_EV_ERROR: u32 = 256;

// The core's `ErrorKind::code()`, in the order of `ErrorKind::ALL` (checked by a test).
pub const PANTO_ERR_CONFIG: u32 = 1;
pub const PANTO_ERR_AUTHENTICATION: u32 = 2;
pub const PANTO_ERR_PERMISSION: u32 = 3;
pub const PANTO_ERR_NOT_FOUND: u32 = 4;
pub const PANTO_ERR_BAD_REQUEST: u32 = 5;
pub const PANTO_ERR_RATE_LIMITED: u32 = 6;
pub const PANTO_ERR_SERVER: u32 = 7;
pub const PANTO_ERR_CONNECTION: u32 = 8;
pub const PANTO_ERR_TIMEOUT: u32 = 9;
pub const PANTO_ERR_PROTOCOL: u32 = 10;
pub const PANTO_ERR_PROVIDER: u32 = 11;
pub const PANTO_ERR_CANCELLED: u32 = 12;
pub const PANTO_ERR_BUSY: u32 = 13;
pub const PANTO_ERR_TOOL: u32 = 14;
pub const PANTO_ERR_INCOMPLETE: u32 = 15;
pub const PANTO_ERR_INTERNAL: u32 = 16;
// Added after ABI 1.1.0 (structured output).
pub const PANTO_ERR_OUTPUT_INVALID: u32 = 17;
pub const PANTO_ERR_OUTPUT_REFUSED: u32 = 18;
pub const PANTO_ERR_OUTPUT_TRUNCATED: u32 = 19;

// `block_start.kind`: the core's `BlockKind`, in declaration order.
pub const PANTO_BLOCK_TEXT: u32 = 1;
pub const PANTO_BLOCK_REASONING: u32 = 2;
pub const PANTO_BLOCK_TOOL_CALL: u32 = 3;

// `content_delta.kind`: the core's `DeltaKind`, in declaration order.
pub const PANTO_DELTA_TEXT: u32 = 1;
pub const PANTO_DELTA_REASONING: u32 = 2;
pub const PANTO_DELTA_TOOL_ARGS: u32 = 3;

// `block_complete.content_type`: the canonical content block types.
pub const PANTO_CONTENT_TEXT: u32 = 1;
pub const PANTO_CONTENT_REASONING: u32 = 2;
pub const PANTO_CONTENT_REDACTED_REASONING: u32 = 3;
pub const PANTO_CONTENT_TOOL_CALL: u32 = 4;

/// No accepted `struct_size` is larger (kept from ABI 1.0; the accepted sizes are now
/// exactly those of released versions, `PANTO_EVENT_SIZE_1_0` so far).
pub const PANTO_EVENT_MAX_STRUCT_SIZE: u32 = 4096;

/// `sizeof(PantoEvent)` in ABI 1.0 (and 1.1, which added no field to it), written as a
/// literal: it must never follow the struct when a later version appends fields, or
/// every program built against 1.0 would be refused.
pub const PANTO_EVENT_SIZE_1_0: u32 = 280;

/// The most events one `panto_next_events` call fills (since ABI 1.3).
pub const PANTO_NEXT_EVENTS_MAX: u32 = 64;

/// A borrowed UTF-8 string: `len` bytes at `ptr`, then a NUL. May contain NUL bytes.
/// `ptr` is NULL (and `len` 0) only for an absent optional value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PantoStr {
    pub ptr: *const c_char,
    pub len: usize,
}

impl PantoStr {
    pub const ABSENT: PantoStr = PantoStr {
        ptr: std::ptr::null(),
        len: 0,
    };
}

/// A string owned by the caller, freed with `panto_string_free`.
#[repr(C)]
#[derive(Debug)]
pub struct PantoString {
    pub ptr: *mut c_char,
    pub len: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PantoUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// Since ABI 1.1: whether the provider reported usage (false: the counts are unknown).
    pub reported: bool,
    pub _reserved0: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoMessageStart {
    pub message: u32,
    pub _reserved0: u32,
    pub model: PantoStr,
    pub response_id: PantoStr,
    /// Since ABI 1.3: milliseconds the request waited for the endpoint's
    /// `max_concurrent_requests` (0: it did not wait, or the agent sets no limit).
    pub queued_ms: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoBlockStart {
    pub message: u32,
    pub block: u32,
    pub kind: u32,
    pub _reserved0: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoContentDelta {
    pub message: u32,
    pub block: u32,
    pub kind: u32,
    pub _reserved0: u32,
    pub text: PantoStr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoToolDetails {
    pub message: u32,
    pub block: u32,
    pub call_id: PantoStr,
    pub name: PantoStr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoBlockComplete {
    pub message: u32,
    pub block: u32,
    pub content_type: u32,
    pub _reserved0: u32,
    pub content: PantoStr,
    pub text: PantoStr,
    pub signature: PantoStr,
    pub call_id: PantoStr,
    pub name: PantoStr,
    pub arguments: PantoStr,
    pub arguments_raw: PantoStr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoMessageEnd {
    pub message: u32,
    pub _reserved0: u32,
    pub stop_reason: PantoStr,
    pub usage: PantoUsage,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoToolCallStart {
    pub message: u32,
    pub host: bool,
    pub _reserved0: [u8; 3],
    pub call_id: PantoStr,
    pub name: PantoStr,
    pub arguments: PantoStr,
    pub arguments_raw: PantoStr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoToolResult {
    pub message: u32,
    pub is_error: bool,
    pub _reserved0: [u8; 3],
    pub call_id: PantoStr,
    pub name: PantoStr,
    pub output: PantoStr,
    pub parts: PantoStr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoProviderRetry {
    pub message: u32,
    pub attempt: u32,
    pub max_attempts: u32,
    pub status: u32,
    pub delay_ms: u64,
    pub reason: PantoStr,
}

/// Since ABI 1.1: the history was compacted before the next request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoHistoryCompacted {
    pub messages_before: u64,
    pub messages_after: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoMessageComplete {
    pub messages: u32,
    pub _reserved0: u32,
    pub stop_reason: PantoStr,
    pub text: PantoStr,
    pub usage: PantoUsage,
    /// Added after ABI 1.1.0: the validated structured output as JSON text; absent
    /// when no output schema applied.
    pub output: PantoStr,
    /// Durable turns: the deferred calls as a JSON array when the turn paused; absent
    /// otherwise.
    pub deferred: PantoStr,
    /// Fallback models: the model that answered the turn's last request.
    pub model: PantoStr,
}

/// Durable turns: a steered message was delivered.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoSteeringDelivered {
    pub message: u32,
    pub _reserved0: u32,
    pub text: PantoStr,
}

/// A running tool call reported progress.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoToolProgress {
    pub message: u32,
    pub _reserved0: u32,
    pub call_id: PantoStr,
    pub name: PantoStr,
    pub progress: f64,
    /// 0 when absent (a total is positive).
    pub total: f64,
    /// Absent when the tool gave none.
    pub text: PantoStr,
}

/// A log line of an MCP server.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoServerLog {
    pub server: PantoStr,
    pub level: PantoStr,
    /// Absent when the server named none.
    pub logger: PantoStr,
    pub data: PantoStr,
}

/// An MCP server's sampling request was settled.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoMcpSamplingRequest {
    pub server: PantoStr,
    pub summary: PantoStr,
    pub max_tokens: u64,
    pub outcome: PantoStr,
}

/// An MCP server's elicitation was settled.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoMcpElicitationRequest {
    pub server: PantoStr,
    pub message: PantoStr,
    pub outcome: PantoStr,
}

/// Fallback models: a step went to the next model of the `fallback` list.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoProviderFallback {
    pub message: u32,
    /// 0 when there was none.
    pub status: u32,
    pub from_provider: PantoStr,
    pub from_model: PantoStr,
    pub to_provider: PantoStr,
    pub to_model: PantoStr,
    pub error_kind: PantoStr,
    pub error_message: PantoStr,
}

/// Added after ABI 1.1.0: an answer did not match the output schema and a repair is
/// asked for.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoOutputRepair {
    pub message: u32,
    pub attempt: u32,
    pub max_attempts: u32,
    pub _reserved0: u32,
    pub error: PantoStr,
}

/// The failure of a `PANTO_ERROR` result (the fields of `PantoError`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoErrorInfo {
    pub kind: u32,
    pub status: u32,
    pub retryable: bool,
    pub _reserved0: [u8; 7],
    pub message: PantoStr,
    pub provider_code: PantoStr,
    /// The server's requested wait before a retry, in ms; 0 if none.
    pub retry_after_ms: u64,
    /// Added after ABI 1.1.0: the raw final answer of a structured-output error;
    /// absent otherwise.
    pub output: PantoStr,
}

/// One arm per event kind; `_reserved` fixes the size for kinds and fields to come.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PantoEventPayload {
    pub message_start: PantoMessageStart,
    pub block_start: PantoBlockStart,
    pub content_delta: PantoContentDelta,
    pub tool_details: PantoToolDetails,
    pub block_complete: PantoBlockComplete,
    pub message_end: PantoMessageEnd,
    pub tool_call_start: PantoToolCallStart,
    pub tool_result: PantoToolResult,
    pub provider_retry: PantoProviderRetry,
    pub message_complete: PantoMessageComplete,
    pub error: PantoErrorInfo,
    pub history_compacted: PantoHistoryCompacted,
    pub output_repair: PantoOutputRepair,
    pub steering_delivered: PantoSteeringDelivered,
    pub tool_progress: PantoToolProgress,
    pub server_log: PantoServerLog,
    pub mcp_sampling_request: PantoMcpSamplingRequest,
    pub mcp_elicitation_request: PantoMcpElicitationRequest,
    pub provider_fallback: PantoProviderFallback,
    pub _reserved: [u64; 32],
}

/// Caller-allocated; the caller sets `struct_size`, the library everything else.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PantoEvent {
    pub struct_size: u32,
    pub kind: u32,
    pub flags: u32,
    /// The generation of the record behind `_private` this event was filled from: a
    /// stale copy of an earlier event no longer matches (`panto_event_to_json`).
    pub _private_gen: u32,
    /// The stream's record slot (for `panto_event_to_json`).
    pub _private: *const c_void,
    pub payload: PantoEventPayload,
}

impl PantoEvent {
    /// An event with every byte zero (a valid value: integers, NULL pointers, `false`).
    pub fn zeroed() -> PantoEvent {
        // SAFETY: every field is an integer, a raw pointer, a bool or a union of such,
        // for all of which the all-zero bit pattern is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

impl PantoEventPayload {
    pub fn zeroed() -> PantoEventPayload {
        PantoEventPayload { _reserved: [0; 32] }
    }
}

//! Owns the memory behind a delivered `PantoEvent`: a [`Record`] keeps the core's event
//! (or error) and every string the payload points into, and computes the canonical JSON
//! on demand. A stream keeps its latest record until the next call on it, which is the
//! "borrowed until the next call" lifetime of the header. A stream's slots keep their
//! records' allocations from event to event (`Slot::set_item`): delivering an event
//! allocates nothing here for the record itself.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use panto_core::{Block, BlockKind, DeltaKind, Error, Event, Usage};

use crate::types::*;

/// Identifies a slot behind `PantoEvent::_private` (against a zeroed or foreign event;
/// a dangling pointer stays undefined behaviour, as the header says).
const SLOT_MAGIC: u64 = 0x7061_6e74_6f53_6c31; // "pantoSl1"

/// Makes `s` NUL-terminated without changing it: a 0 byte right after its last byte, in
/// its spare capacity. The string must not be mutated afterwards (a record never does).
fn terminate(s: &mut String) {
    s.reserve(1);
    // SAFETY: `reserve(1)` guarantees at least one byte of spare capacity; writing a u8
    // there changes neither the string's length nor its contents.
    unsafe { s.as_mut_vec().spare_capacity_mut()[0].write(0) };
}

/// A view of a string already passed through [`terminate`].
fn view(s: &str) -> PantoStr {
    PantoStr {
        ptr: s.as_ptr().cast::<c_char>(),
        len: s.len(),
    }
}

fn opt_view(s: &Option<String>) -> PantoStr {
    s.as_deref().map_or(PantoStr::ABSENT, view)
}

fn usage(u: &Usage) -> PantoUsage {
    PantoUsage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
        reasoning_tokens: u.reasoning_tokens,
        reported: u.reported,
        _reserved0: [0; 7],
    }
}

pub(crate) fn block_kind_code(k: BlockKind) -> u32 {
    match k {
        BlockKind::Text => PANTO_BLOCK_TEXT,
        BlockKind::Reasoning => PANTO_BLOCK_REASONING,
        BlockKind::ToolCall => PANTO_BLOCK_TOOL_CALL,
    }
}

pub(crate) fn delta_kind_code(k: DeltaKind) -> u32 {
    match k {
        DeltaKind::Text => PANTO_DELTA_TEXT,
        DeltaKind::Reasoning => PANTO_DELTA_REASONING,
        DeltaKind::ToolArgs => PANTO_DELTA_TOOL_ARGS,
    }
}

/// What a record holds.
pub(crate) enum Item {
    Event(Event),
    Error(Error),
}

/// A delivered event or error with everything its `PantoEvent` points into.
pub(crate) struct Record {
    item: Item,
    /// Strings the payload needs that the event does not hold as such (a stop reason, a
    /// block's JSON, arguments as JSON text). Never mutated while the record is
    /// current (only `refill`, by the slot's one writer, changes it); only read through
    /// the payload's pointers.
    #[allow(dead_code)]
    derived: Vec<String>,
    kind: u32,
    payload: PantoEventPayload,
    /// False for an event this file does not map (`fill_event`'s last arm): its payload
    /// is all zero. A unit test builds every event of the vocabulary and fails, naming
    /// it, on any that is not mapped.
    #[cfg_attr(not(test), allow(dead_code))]
    mapped: bool,
    json: OnceLock<String>,
}

// SAFETY: the raw pointers in `payload` point into strings this record owns (in `item`
// and `derived`), which nothing mutates while they are shared (`refill` takes the
// record mutably, from the slot's one writer); sharing or sending the
// record shares or sends only read-only views of its own data.
unsafe impl Send for Record {}
// SAFETY: as for `Send`: every access through a shared record is a read.
unsafe impl Sync for Record {}

impl Record {
    #[cfg(test)]
    pub(crate) fn event(event: Event) -> Box<Record> {
        Record::build(Item::Event(event))
    }

    pub(crate) fn error(error: Error) -> Box<Record> {
        Record::build(Item::Error(error))
    }

    fn build(item: Item) -> Box<Record> {
        let mut record = Box::new(Record {
            item,
            derived: Vec::new(),
            kind: 0,
            payload: PantoEventPayload::zeroed(),
            mapped: true,
            json: OnceLock::new(),
        });
        record.map();
        record
    }

    /// Makes this record hold `item` instead, in place: the box and the derived
    /// strings' vector are reused (a stream delivers every event through the same
    /// records, so delivering one allocates nothing here beyond what the event needs
    /// derived: a stop reason, a block's JSON).
    pub(crate) fn refill(&mut self, item: Item) {
        self.item = item;
        self.derived.clear();
        self.payload = PantoEventPayload::zeroed();
        self.mapped = true;
        self.json = OnceLock::new();
        self.map();
    }

    /// Computes `kind` and `payload` from `item`.
    fn map(&mut self) {
        let Record {
            item,
            derived,
            kind,
            payload,
            mapped,
            ..
        } = self;
        *kind = match item {
            Item::Error(e) => {
                terminate(&mut e.message);
                if let Some(c) = &mut e.provider_code {
                    terminate(c);
                }
                if let Some(o) = &mut e.output {
                    terminate(o);
                }
                payload.error = PantoErrorInfo {
                    kind: e.kind.code(),
                    status: u32::from(e.status),
                    retryable: e.retryable,
                    _reserved0: [0; 7],
                    message: view(&e.message),
                    provider_code: opt_view(&e.provider_code),
                    retry_after_ms: e.retry_after_ms.unwrap_or(0),
                    output: e.output.as_deref().map_or(PantoStr::ABSENT, |o| view(o)),
                };
                PANTO_EV_ERROR
            }
            Item::Event(ev) => {
                let code = ev.code();
                *mapped = fill_event(ev, derived, payload);
                code
            }
        };
    }

    /// Writes this record's kind and payload into `ev` (the slot adds `_private`).
    fn fill(&self, ev: &mut PantoEvent) {
        ev.kind = self.kind;
        ev.payload = self.payload;
    }

    /// The canonical JSON (`Event::to_json` / `Error::to_json`), NUL-terminated.
    pub(crate) fn json(&self) -> PantoStr {
        let json = self.json.get_or_init(|| {
            let mut s = match &self.item {
                Item::Event(ev) => ev.to_json(),
                Item::Error(e) => e.to_json(),
            };
            terminate(&mut s);
            s
        });
        view(json)
    }

    pub(crate) fn kind(&self) -> u32 {
        self.kind
    }

    /// Whether the payload was filled (see the field).
    #[cfg(test)]
    pub(crate) fn mapped(&self) -> bool {
        self.mapped
    }

    #[cfg(test)]
    pub(crate) fn derived_len(&self) -> usize {
        self.derived.len()
    }
}

/// Where a stream keeps its latest record, at an address that stays the same for the
/// stream's whole life. Every event the stream delivers points here (`_private`) with the
/// generation it was delivered under (`_private_gen`), and the generation changes with
/// every next call. So a copy of an earlier event finds a live slot holding another
/// generation and is refused — rather than reading whatever record now sits where its
/// own was freed (the allocator reuses that address for the very next event).
pub(crate) struct Slot {
    magic: u64,
    /// 0 while the record is being replaced, never for a filled event.
    gen: AtomicU32,
    held: UnsafeCell<Held>,
}

/// A slot's record, and whether it is the current one: a slot that is emptied keeps its
/// record's allocation for the next event (`Record::refill`).
struct Held {
    record: Option<Box<Record>>,
    live: bool,
}

impl Held {
    fn current(&self) -> Option<&Record> {
        self.record.as_deref().filter(|_| self.live)
    }
}

// SAFETY: `held` is changed only through `Slot::set` / `Slot::set_item`, whose callers
// are the slot's only writer (the stream's consumer, under its lock); readers
// (`panto_event_to_json` on any thread) only read it while the event's lifetime lasts,
// that is, while no writer runs (the header's rule; breaking it is the undefined
// behaviour it lists).
unsafe impl Send for Slot {}
// SAFETY: as for `Send`: shared access reads, and the one writer is serialized.
unsafe impl Sync for Slot {}

impl Slot {
    pub(crate) fn new() -> Slot {
        Slot {
            magic: SLOT_MAGIC,
            gen: AtomicU32::new(0),
            held: UnsafeCell::new(Held {
                record: None,
                live: false,
            }),
        }
    }

    /// A slot that holds `record` for good (errors with no stream to keep them).
    pub(crate) fn holding(record: Box<Record>) -> Slot {
        let slot = Slot::new();
        // SAFETY: the slot is not shared yet.
        unsafe { slot.set(Some(record)) };
        slot
    }

    /// Replaces the record (`None`: no event) under a new generation: every event filled
    /// before stops matching.
    ///
    /// # Safety
    /// The caller is the slot's only writer, and nobody reads the old record any more.
    pub(crate) unsafe fn set(&self, record: Option<Box<Record>>) {
        // SAFETY: this function's contract is `replace`'s.
        unsafe {
            self.replace(|held| {
                held.live = record.is_some();
                held.record = record;
            })
        };
    }

    /// Like [`Slot::set`], reusing the record this slot held (emptied or not) if any:
    /// no allocation for the record itself.
    ///
    /// # Safety
    /// As for [`Slot::set`].
    pub(crate) unsafe fn set_item(&self, item: Option<Item>) {
        // SAFETY: this function's contract is `replace`'s.
        unsafe {
            self.replace(|held| match item {
                None => held.live = false,
                Some(item) => {
                    match &mut held.record {
                        Some(r) => r.refill(item),
                        None => held.record = Some(Record::build(item)),
                    }
                    held.live = true;
                }
            })
        };
    }

    /// Runs `change` on the held record under a new generation.
    ///
    /// # Safety
    /// As for [`Slot::set`].
    unsafe fn replace(&self, change: impl FnOnce(&mut Held)) {
        let next = self.gen.load(Ordering::SeqCst).wrapping_add(1).max(1);
        self.gen.store(0, Ordering::SeqCst);
        // SAFETY: the only writer, with no reader of the old record (this function's
        // contract): nothing else refers to the cell's contents now.
        change(unsafe { &mut *self.held.get() });
        self.gen.store(next, Ordering::SeqCst);
    }

    /// Writes the current record into `ev` and ties `ev` to this slot and generation; an
    /// empty slot leaves `ev` as it is (no event: kind 0, `_private` NULL).
    ///
    /// # Safety
    /// As for reading the record: no concurrent [`Slot::set`].
    pub(crate) unsafe fn fill(&self, ev: &mut PantoEvent) {
        // SAFETY: no `set` runs meanwhile (this function's contract), so reading the
        // cell's contents races with no write.
        if let Some(r) = unsafe { (*self.held.get()).current() } {
            r.fill(ev);
            ev._private = (self as *const Slot).cast::<c_void>();
            ev._private_gen = self.gen.load(Ordering::SeqCst);
        }
    }

    /// The record an event was filled from, if `private` is a slot that still holds it
    /// (`gen` is the event's generation).
    ///
    /// # Safety
    /// `private` is NULL or was set by [`Slot::fill`] from a slot that is still alive,
    /// and no [`Slot::set`] on it runs concurrently.
    pub(crate) unsafe fn record_of<'a>(private: *const c_void, gen: u32) -> Option<&'a Record> {
        // SAFETY: NULL or the address of a live slot (this function's contract);
        // `as_ref` checks NULL.
        let slot = unsafe { private.cast::<Slot>().as_ref() }?;
        if slot.magic != SLOT_MAGIC || gen == 0 || slot.gen.load(Ordering::SeqCst) != gen {
            return None;
        }
        // SAFETY: no `set` on this slot runs meanwhile (this function's contract); the
        // record lives until the next `set`, which the header's lifetime rule puts after
        // every use of the event.
        unsafe { (*slot.held.get()).current() }
    }
}

/// Fills `payload` from `ev`, terminating the event's own strings in place and keeping
/// derived ones in `derived`. Each derived string is pushed before it is viewed; pushing
/// moves only the `String` (pointer, length, capacity), never its bytes. False for an
/// event kind it does not map (left all zero).
fn fill_event(ev: &mut Event, derived: &mut Vec<String>, payload: &mut PantoEventPayload) -> bool {
    let mut keep = |mut s: String| -> PantoStr {
        terminate(&mut s);
        let v = view(&s);
        derived.push(s);
        v
    };
    match ev {
        Event::MessageStart {
            message,
            model,
            response_id,
            queued_ms,
        } => {
            terminate(model);
            if let Some(r) = response_id {
                terminate(r);
            }
            payload.message_start = PantoMessageStart {
                message: *message,
                _reserved0: 0,
                model: view(model),
                response_id: opt_view(response_id),
                queued_ms: queued_ms.unwrap_or(0),
            };
        }
        Event::BlockStart {
            message,
            block,
            kind,
        } => {
            payload.block_start = PantoBlockStart {
                message: *message,
                block: *block,
                kind: block_kind_code(*kind),
                _reserved0: 0,
            };
        }
        Event::ContentDelta {
            message,
            block,
            kind,
            text,
        } => {
            terminate(text);
            payload.content_delta = PantoContentDelta {
                message: *message,
                block: *block,
                kind: delta_kind_code(*kind),
                _reserved0: 0,
                text: view(text),
            };
        }
        Event::ToolDetails {
            message,
            block,
            call_id,
            name,
        } => {
            terminate(call_id);
            terminate(name);
            payload.tool_details = PantoToolDetails {
                message: *message,
                block: *block,
                call_id: view(call_id),
                name: view(name),
            };
        }
        Event::BlockComplete {
            message,
            block,
            content,
        } => {
            // Serialized before any string of the block is touched; terminating does
            // not change a string's contents anyway.
            let (content_json, arguments_json) = content_and_arguments_json(content);
            let mut out = PantoBlockComplete {
                message: *message,
                block: *block,
                content_type: 0,
                _reserved0: 0,
                content: keep(content_json),
                text: PantoStr::ABSENT,
                signature: PantoStr::ABSENT,
                call_id: PantoStr::ABSENT,
                name: PantoStr::ABSENT,
                arguments: PantoStr::ABSENT,
                arguments_raw: PantoStr::ABSENT,
            };
            match content {
                Block::Text { text } => {
                    terminate(text);
                    out.content_type = PANTO_CONTENT_TEXT;
                    out.text = view(text);
                }
                Block::Reasoning { text, signature } => {
                    terminate(text);
                    if let Some(s) = signature {
                        terminate(s);
                    }
                    out.content_type = PANTO_CONTENT_REASONING;
                    out.text = view(text);
                    out.signature = opt_view(signature);
                }
                Block::RedactedReasoning { data } => {
                    terminate(data);
                    out.content_type = PANTO_CONTENT_REDACTED_REASONING;
                    out.text = view(data);
                }
                Block::ToolCall {
                    call_id,
                    name,
                    arguments,
                    arguments_raw,
                } => {
                    terminate(call_id);
                    terminate(name);
                    if let Some(r) = arguments_raw {
                        terminate(r);
                    }
                    out.content_type = PANTO_CONTENT_TOOL_CALL;
                    out.call_id = view(call_id);
                    out.name = view(name);
                    out.arguments = match (arguments, arguments_json) {
                        (Some(_), Some(text)) => keep(text),
                        (Some(v), None) => keep(v.to_string()),
                        (None, _) => PantoStr::ABSENT,
                    };
                    out.arguments_raw = opt_view(arguments_raw);
                }
                // Results never appear in block_complete (they are events of their own);
                // the type stays 0, "unknown", and `content` still has the JSON.
                Block::ToolResult { .. }
                | Block::Opaque { .. }
                | Block::Image(_)
                | Block::Document(_) => {}
            }
            payload.block_complete = out;
        }
        Event::MessageEnd {
            message,
            stop_reason,
            usage: u,
        } => {
            payload.message_end = PantoMessageEnd {
                message: *message,
                _reserved0: 0,
                stop_reason: keep(stop_reason.as_string()),
                usage: usage(u),
            };
        }
        Event::ToolCallStart {
            message,
            call_id,
            name,
            arguments,
            arguments_raw,
            host,
        } => {
            terminate(call_id);
            terminate(name);
            if let Some(r) = arguments_raw {
                terminate(r);
            }
            payload.tool_call_start = PantoToolCallStart {
                message: *message,
                host: *host,
                _reserved0: [0; 3],
                call_id: view(call_id),
                name: view(name),
                arguments: arguments
                    .as_ref()
                    .map_or(PantoStr::ABSENT, |v| keep(v.to_string())),
                arguments_raw: opt_view(arguments_raw),
            };
        }
        Event::ToolResult {
            message,
            call_id,
            name,
            output,
            is_error,
            parts,
        } => {
            terminate(call_id);
            terminate(name);
            terminate(output);
            payload.tool_result = PantoToolResult {
                message: *message,
                is_error: *is_error,
                _reserved0: [0; 3],
                call_id: view(call_id),
                name: view(name),
                output: view(output),
                parts: if parts.is_empty() {
                    PantoStr::ABSENT
                } else {
                    keep(panto_core::event::tool_parts::to_json(parts))
                },
            };
        }
        Event::ProviderRetry {
            message,
            attempt,
            max_attempts,
            delay_ms,
            reason,
            status,
        } => {
            terminate(reason);
            payload.provider_retry = PantoProviderRetry {
                message: *message,
                attempt: *attempt,
                max_attempts: *max_attempts,
                status: status.map_or(0, u32::from),
                delay_ms: *delay_ms,
                reason: view(reason),
            };
        }
        Event::MessageComplete {
            stop_reason,
            usage: u,
            messages,
            text,
            output,
            deferred,
            model,
        } => {
            terminate(text);
            terminate(model);
            payload.message_complete = PantoMessageComplete {
                model: view(model),
                deferred: if deferred.is_empty() {
                    PantoStr::ABSENT
                } else {
                    keep(serde_json::to_string(deferred).unwrap_or_default())
                },
                messages: *messages,
                _reserved0: 0,
                stop_reason: keep(stop_reason.as_string()),
                text: view(text),
                usage: usage(u),
                output: output
                    .as_ref()
                    .map_or(PantoStr::ABSENT, |v| keep(v.to_string())),
            };
        }
        Event::OutputRepair {
            message,
            attempt,
            max_attempts,
            error,
        } => {
            terminate(error);
            payload.output_repair = PantoOutputRepair {
                message: *message,
                attempt: *attempt,
                max_attempts: *max_attempts,
                _reserved0: 0,
                error: view(error),
            };
        }
        Event::HistoryCompacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        } => {
            payload.history_compacted = PantoHistoryCompacted {
                messages_before: *messages_before,
                messages_after: *messages_after,
                tokens_before: *tokens_before,
                tokens_after: *tokens_after,
            };
        }
        Event::SteeringDelivered { message, text } => {
            terminate(text);
            payload.steering_delivered = PantoSteeringDelivered {
                message: *message,
                _reserved0: 0,
                text: view(text),
            };
        }
        Event::ToolProgress {
            message,
            call_id,
            name,
            progress,
            total,
            text,
        } => {
            terminate(call_id);
            terminate(name);
            if let Some(t) = text {
                terminate(t);
            }
            payload.tool_progress = PantoToolProgress {
                message: *message,
                _reserved0: 0,
                call_id: view(call_id),
                name: view(name),
                progress: *progress,
                total: total.unwrap_or(0.0),
                text: opt_view(text),
            };
        }
        Event::ServerLog {
            server,
            level,
            logger,
            data,
        } => {
            terminate(server);
            terminate(level);
            if let Some(l) = logger {
                terminate(l);
            }
            terminate(data);
            payload.server_log = PantoServerLog {
                server: view(server),
                level: view(level),
                logger: opt_view(logger),
                data: view(data),
            };
        }
        Event::McpSamplingRequest {
            server,
            summary,
            max_tokens,
            outcome,
        } => {
            terminate(server);
            terminate(summary);
            terminate(outcome);
            payload.mcp_sampling_request = PantoMcpSamplingRequest {
                server: view(server),
                summary: view(summary),
                max_tokens: *max_tokens,
                outcome: view(outcome),
            };
        }
        Event::McpElicitationRequest {
            server,
            message,
            outcome,
        } => {
            terminate(server);
            terminate(message);
            terminate(outcome);
            payload.mcp_elicitation_request = PantoMcpElicitationRequest {
                server: view(server),
                message: view(message),
                outcome: view(outcome),
            };
        }
        Event::ProviderFallback {
            message,
            from_provider,
            from_model,
            to_provider,
            to_model,
            error_kind,
            error_message,
            status,
        } => {
            for s in [
                &mut *from_provider,
                &mut *from_model,
                &mut *to_provider,
                &mut *to_model,
                &mut *error_kind,
                &mut *error_message,
            ] {
                terminate(s);
            }
            payload.provider_fallback = PantoProviderFallback {
                message: *message,
                status: status.map_or(0, u32::from),
                from_provider: view(from_provider),
                from_model: view(from_model),
                to_provider: view(to_provider),
                to_model: view(to_model),
                error_kind: view(error_kind),
                error_message: view(error_message),
            };
        }
        // `Event` is non-exhaustive, so this arm must exist; an event that reaches it is
        // one added to the core without its payload here. It would be delivered with its
        // code and an all-zero payload (its JSON complete), which a C reader cannot tell
        // from real zeros: the test `every_event_of_the_vocabulary_has_a_c_payload` fails
        // naming it, so that never ships.
        #[allow(unreachable_patterns)]
        _ => return false,
    }
    true
}

/// A block's canonical JSON and, for a tool call with parsed arguments, the arguments'
/// JSON text. The arguments are serialized once: the block's JSON is assembled around
/// that text, in the field order serde writes (`type`, `call_id`, `name`, `arguments`,
/// `arguments_raw`), so `content` and `arguments` hold the same bytes without a second
/// serialization of what can be a large value. A test compares it with serde's output.
pub(crate) fn content_and_arguments_json(block: &Block) -> (String, Option<String>) {
    let Block::ToolCall {
        call_id,
        name,
        arguments: Some(arguments),
        arguments_raw,
    } = block
    else {
        return (serde_json_string(block), None);
    };
    // Strings and JSON values only: serializing cannot fail.
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let args = serde_json::to_string(arguments).unwrap_or_default();
    let mut out = String::with_capacity(args.len() + call_id.len() + name.len() + 64);
    out.push_str(r#"{"type":"tool_call","call_id":"#);
    out.push_str(&text(call_id));
    out.push_str(r#","name":"#);
    out.push_str(&text(name));
    out.push_str(r#","arguments":"#);
    out.push_str(&args);
    if let Some(raw) = arguments_raw {
        out.push_str(r#","arguments_raw":"#);
        out.push_str(&text(raw));
    }
    out.push('}');
    (out, Some(args))
}

fn serde_json_string(block: &Block) -> String {
    // A block holds only strings, booleans and JSON values: serializing cannot fail.
    serde_json::to_string(block).unwrap_or_default()
}

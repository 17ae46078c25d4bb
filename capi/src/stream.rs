//! Owns `PantoStream`: the pull calls (`panto_next_event`, its timeout variant, the batch
//! `panto_next_events`), cancel,
//! host-tool results, the readiness descriptor, the diagnostics, free — and writing a
//! `PantoEvent` into the caller's memory without ever reading or writing past the size
//! the caller declared.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use panto_core::{Error, ErrorKind};
use panto_pull::{Next, Stream, StreamControl};

use crate::boundary::{guard, input_str, invalid, maybe_panic, poisoned, ErrOut};
use crate::error::PantoError;
use crate::record::{Item, Record, Slot};
use crate::types::*;

/// One turn as a pull stream. One next call at a time goes in (`calls`); a second one
/// waits for it to return and reports `busy` without touching anything. `control` serves
/// cancel, host-tool results and diagnostics from any thread without either lock.
pub struct PantoStream {
    pub(crate) control: StreamControl,
    consumer: Mutex<Consumer>,
    /// Whether a next call is inside, and how many have returned (a waiting second
    /// caller waits for that count to move, not for the flag to drop: the first caller
    /// may well be back inside by the time the second wakes).
    calls: Mutex<Calls>,
    call_returned: Condvar,
    /// The last delivered event or error: what the caller's `PantoEvent` points into.
    /// Written only by the next call that is inside (see `Slot`).
    current: Slot,
    /// Where the second and later events of a `panto_next_events` batch live, made on
    /// the first batch of more than one (never resized after: events point into it).
    /// Written, like `current`, only by the next call that is inside.
    extra: OnceLock<Box<[Slot]>>,
    pub(crate) poisoned: AtomicBool,
    /// The limit of a file a tool result's `"path"` part names (`max_message_bytes`).
    pub(crate) max_file_bytes: usize,
}

struct Consumer {
    stream: Stream,
    /// How many of `extra`'s slots the last batch filled (emptied by the next call).
    extra_used: usize,
}

#[derive(Default)]
struct Calls {
    inside: bool,
    returned: u64,
}

impl PantoStream {
    /// `max_file_bytes` (the agent's `max_message_bytes`) bounds each file a tool
    /// result's `"path"` part names.
    pub(crate) fn new(stream: Stream, max_file_bytes: usize) -> Box<PantoStream> {
        Box::new(PantoStream {
            control: stream.control(),
            max_file_bytes,
            consumer: Mutex::new(Consumer {
                stream,
                extra_used: 0,
            }),
            calls: Mutex::new(Calls::default()),
            call_returned: Condvar::new(),
            current: Slot::new(),
            extra: OnceLock::new(),
            poisoned: AtomicBool::new(false),
        })
    }

    /// After a caught panic nothing about this stream can be trusted: stop its turn and
    /// fail every later call.
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::SeqCst);
        let _ = guard("poison", || self.control.cancel());
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a next call, or — another one being inside — waits until that one returns
    /// (at most `wait`) and says no. Parked on a condition variable, never spinning: a
    /// second consumer that retries at once costs one wake-up per call of the first.
    fn enter(&self, wait: Wait) -> Option<Inside<'_>> {
        let mut calls = self.calls();
        if !calls.inside {
            calls.inside = true;
            return Some(Inside(self));
        }
        let seen = calls.returned;
        let deadline = match wait {
            Wait::Poll => return None,
            Wait::Forever => None,
            Wait::For(d) => Instant::now().checked_add(d),
        };
        while calls.returned == seen {
            calls = match deadline {
                None => self
                    .call_returned
                    .wait(calls)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.call_returned
                        .wait_timeout(calls, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        None
    }
}

/// A next call inside its stream; leaving (also by unwinding) lets the next one in and
/// wakes a caller waiting to be told `busy`.
struct Inside<'a>(&'a PantoStream);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let mut calls = self.0.calls();
        calls.inside = false;
        calls.returned = calls.returned.wrapping_add(1);
        drop(calls);
        self.0.call_returned.notify_all();
    }
}

/// How long a `next` may wait.
#[derive(Clone, Copy)]
enum Wait {
    Forever,
    Poll,
    For(Duration),
}

/// The `struct_size` values accepted: `sizeof(PantoEvent)` of every released ABI version,
/// each a literal. Anything else is taken for garbage (a forgotten `PANTO_EVENT_INIT`)
/// and nothing is written: zero-filling "up to struct_size" for any plausible-looking
/// value would wipe that much of the caller's stack. A version that appends fields to
/// `PantoEvent` adds its size here, and keeps every earlier one.
const RELEASED_EVENT_SIZES: &[u32] = &[PANTO_EVENT_SIZE_1_0];

// This library's struct is one of the released sizes (a new field needs a new entry),
// and is never smaller than 1.0's.
const _: () = {
    let mut i = 0;
    let mut known = false;
    while i < RELEASED_EVENT_SIZES.len() {
        known |= RELEASED_EVENT_SIZES[i] as usize == std::mem::size_of::<PantoEvent>();
        i += 1;
    }
    assert!(known, "sizeof(PantoEvent) is not in RELEASED_EVENT_SIZES");
    assert!(std::mem::size_of::<PantoEvent>() >= PANTO_EVENT_SIZE_1_0 as usize);
};

/// Whether `size` is the `struct_size` of a released version.
pub(crate) fn accepted_size(size: u32) -> bool {
    RELEASED_EVENT_SIZES.contains(&size)
}

/// The `struct_size` of the caller's event, if acceptable.
///
/// # Safety
/// `out` is NULL or points to at least 4 readable bytes.
unsafe fn event_size(out: *const PantoEvent) -> Option<u32> {
    if out.is_null() {
        return None;
    }
    // SAFETY: non-NULL (checked above) with 4 readable bytes (this function's contract);
    // `struct_size` is the first field, and a u32 at a PantoEvent's address is aligned.
    let size = unsafe { out.cast::<u32>().read() };
    accepted_size(size).then_some(size)
}

/// Writes `ev` into the caller's event of `size` bytes: the fields that fit, then zeros up
/// to `size` (fields of versions newer than this library read as absent). Never forms a
/// reference to the caller's memory, whose size is only what the caller declared.
///
/// # Safety
/// `out` points to `size` writable bytes, `size` is an accepted size.
unsafe fn write_event(out: *mut PantoEvent, size: u32, mut ev: PantoEvent) {
    ev.struct_size = size;
    let known = std::mem::size_of::<PantoEvent>().min(size as usize);
    let dst = out.cast::<u8>();
    // SAFETY: `out` has `size` writable bytes (this function's contract) and
    // `known <= size`; the source is a local of at least `known` bytes, so the two do
    // not overlap; the zeros go to bytes `known..size` of the caller's, within `size`.
    unsafe {
        std::ptr::copy_nonoverlapping((&ev as *const PantoEvent).cast::<u8>(), dst, known);
        std::ptr::write_bytes(dst.add(known), 0, size as usize - known);
    }
}

/// Fills the caller's event from `slot` (an empty slot: no event) and returns `status`.
///
/// # Safety
/// As for [`write_event`]; nobody replaces the slot's record meanwhile.
unsafe fn deliver(
    out: *mut PantoEvent,
    size: u32,
    slot: &Slot,
    status: PantoStatus,
) -> PantoStatus {
    let mut ev = PantoEvent::zeroed();
    // SAFETY: nobody replaces the slot's record meanwhile (this function's contract).
    unsafe { slot.fill(&mut ev) };
    // SAFETY: `out` has `size` writable bytes, an accepted size (this function's contract).
    unsafe { write_event(out, size, ev) };
    status
}

/// Errors that have no stream to keep them: they live as long as the process.
fn static_error(function: &'static str, message: &'static str) -> &'static Slot {
    static SLOTS: OnceLock<Vec<(&'static str, &'static str, Slot)>> = OnceLock::new();
    let all = SLOTS.get_or_init(|| {
        let mut v = Vec::new();
        for f in [
            "panto_next_event",
            "panto_next_event_timeout",
            "panto_next_events",
        ] {
            v.push((
                f,
                NULL_STREAM,
                Slot::holding(Record::error(invalid(f, NULL_STREAM))),
            ));
            let busy = Error::new(ErrorKind::Busy, format!("{f}: {IN_USE}"));
            v.push((f, IN_USE, Slot::holding(Record::error(busy))));
            let forked = Slot::holding(Record::error(invalid(f, FORKED_STREAM)));
            v.push((f, FORKED_STREAM, forked));
        }
        v
    });
    all.iter()
        .find(|(f, m, _)| *f == function && *m == message)
        .map(|(_, _, slot)| slot)
        .unwrap_or(&all[0].2)
}

const NULL_STREAM: &str = "stream is NULL";
pub(crate) const FORKED_STREAM: &str =
    "this stream was started before the process forked: panto's \
     threads do not survive fork(), so its turn does not run in the child; free it there \
     (freeing does not wait), and start turns of agents made in the child";
const IN_USE: &str = "another thread is inside a next call on this stream (one consumer at \
     a time); this call waited for it to return and consumed nothing";

/// The two next calls: checks, then one step of the stream delivered into `out`.
///
/// # Safety
/// `stream` is NULL or a live stream; `out` is NULL or points to a `PantoEvent` of its
/// declared `struct_size` bytes, writable (panto.h).
unsafe fn next(
    function: &'static str,
    stream: *mut PantoStream,
    out: *mut PantoEvent,
    wait: Wait,
) -> PantoStatus {
    // SAFETY: NULL or a caller's event, whose first 4 bytes are readable (contract).
    let Some(size) = (unsafe { event_size(out) }) else {
        // Nowhere to put anything: a NULL event or a struct_size that is not one.
        return PANTO_ERROR;
    };
    // Every answer from here on. `slot` is a static one (never replaced) or this
    // stream's, which only this call replaces, and not while delivering it.
    let answer = |slot: &Slot, status: PantoStatus| {
        // SAFETY: `out` has `size` writable bytes: `size` is an accepted struct_size and
        // the caller's event is that large (contract); no `set` of `slot` runs meanwhile.
        unsafe { deliver(out, size, slot, status) }
    };
    // SAFETY: NULL or a live stream (contract); `as_ref` checks NULL.
    let Some(stream) = (unsafe { stream.as_ref() }) else {
        return answer(static_error(function, NULL_STREAM), PANTO_ERROR);
    };
    // A stream of the parent in a forked child: its turn is not running here, and its
    // locks may have been held by a thread that does not exist here. Fail before any.
    if stream.control.from_parent_process() {
        return answer(static_error(function, FORKED_STREAM), PANTO_ERROR);
    }
    let Some(_inside) = stream.enter(wait) else {
        // Not this stream's error: it is neither sticky nor recorded, and the event of
        // the call that is inside stays valid.
        return answer(static_error(function, IN_USE), PANTO_ERROR);
    };
    let mut consumer = match stream.consumer.lock() {
        Ok(c) => c,
        Err(p) => {
            stream.poison();
            p.into_inner()
        }
    };
    let consumer = &mut *consumer;
    // SAFETY: this call is the one inside the stream (`enter`) and holds the consumer
    // lock (the slots' only writer); the caller's previous events are dead by the
    // header's lifetime rule.
    unsafe { stream.start_call(consumer) };
    if stream.poisoned.load(Ordering::SeqCst) {
        let error = Item::Error(poisoned(function, "stream"));
        // SAFETY: as above: the only writer, the old record unread.
        unsafe { stream.current.set_item(Some(error)) };
        return answer(&stream.current, PANTO_ERROR);
    }
    let (status, item) = first_step(function, stream, consumer, wait);
    // SAFETY: as above: the only writer, and the slot is empty.
    unsafe { stream.current.set_item(item) };
    answer(&stream.current, status)
}

impl PantoStream {
    /// The previous call's events end here (the header's "until the next call"): every
    /// slot they point into is emptied under a new generation, keeping its record's
    /// allocation for the events to come.
    ///
    /// # Safety
    /// The caller is the next call inside this stream, holding `consumer` (the slots'
    /// only writer), and nobody reads the previous call's events any more.
    unsafe fn start_call(&self, consumer: &mut Consumer) {
        // SAFETY: the only writer, the old records unread (this function's contract).
        unsafe { self.current.set_item(None) };
        if consumer.extra_used > 0 {
            if let Some(extra) = self.extra.get() {
                for slot in &extra[..consumer.extra_used] {
                    // SAFETY: as above.
                    unsafe { slot.set_item(None) };
                }
            }
            consumer.extra_used = 0;
        }
    }
}

/// One step of the stream for a next call, waiting as `wait` says; a panic poisons the
/// stream and is answered as its error.
fn first_step(
    function: &'static str,
    stream: &PantoStream,
    consumer: &mut Consumer,
    wait: Wait,
) -> (PantoStatus, Option<Item>) {
    let step = guard(function, || {
        maybe_panic();
        let next = match wait {
            Wait::Forever => consumer
                .stream
                .next()
                .map(|e| e.map_or(Next::Done, Next::Event)),
            Wait::Poll => consumer.stream.try_next(),
            Wait::For(d) => consumer.stream.next_timeout(d),
        };
        match next {
            Ok(Next::Event(ev)) => (PANTO_EVENT, Some(Item::Event(ev))),
            Ok(Next::Done) => (PANTO_DONE, None),
            Ok(Next::Pending) => (PANTO_PENDING, None),
            Err(e) => (PANTO_ERROR, Some(Item::Error(e))),
        }
    });
    match step {
        Ok(s) => s,
        Err(panic) => {
            stream.poison();
            (PANTO_ERROR, Some(Item::Error(panic)))
        }
    }
}

/// The most events one `panto_next_events` call fills (panto.h).
const NEXT_EVENTS_MAX: usize = PANTO_NEXT_EVENTS_MAX as usize;

/// `panto_next_events`: the first answer as `panto_next_event_timeout` gives it, then,
/// after an event, what else is ready without waiting, into the caller's array.
///
/// # Safety
/// As for [`next`], with `events` an array of `capacity` events of the first one's
/// struct_size each; `filled` and `more` NULL or writable.
unsafe fn next_events(
    stream: *mut PantoStream,
    events: *mut PantoEvent,
    capacity: usize,
    wait: Wait,
    filled: *mut usize,
    more: *mut bool,
) -> PantoStatus {
    const F: &str = "panto_next_events";
    if filled.is_null() || more.is_null() {
        return PANTO_ERROR;
    }
    // SAFETY: both non-NULL (checked above) and writable (this function's contract).
    unsafe {
        filled.write(0);
        more.write(false);
    }
    if capacity == 0 {
        return PANTO_ERROR;
    }
    // SAFETY: NULL or a caller's event, whose first 4 bytes are readable (contract).
    let Some(size) = (unsafe { event_size(events) }) else {
        return PANTO_ERROR;
    };
    let at = |i: usize| {
        events
            .cast::<u8>()
            .wrapping_add(i * size as usize)
            .cast::<PantoEvent>()
    };
    let answer = |slot: &Slot, status: PantoStatus| {
        // SAFETY: element 0 has `size` writable bytes (contract); no `set` of `slot`
        // runs meanwhile.
        unsafe { deliver(events, size, slot, status) }
    };
    // SAFETY: NULL or a live stream (contract); `as_ref` checks NULL.
    let Some(stream) = (unsafe { stream.as_ref() }) else {
        return answer(static_error(F, NULL_STREAM), PANTO_ERROR);
    };
    if stream.control.from_parent_process() {
        return answer(static_error(F, FORKED_STREAM), PANTO_ERROR);
    }
    let Some(_inside) = stream.enter(wait) else {
        return answer(static_error(F, IN_USE), PANTO_ERROR);
    };
    let mut consumer = match stream.consumer.lock() {
        Ok(c) => c,
        Err(p) => {
            stream.poison();
            p.into_inner()
        }
    };
    let consumer = &mut *consumer;
    // SAFETY: this call is the one inside the stream and holds the consumer lock; the
    // previous call's events are dead by the header's lifetime rule.
    unsafe { stream.start_call(consumer) };
    if stream.poisoned.load(Ordering::SeqCst) {
        // SAFETY: as above.
        unsafe {
            stream
                .current
                .set_item(Some(Item::Error(poisoned(F, "stream"))))
        };
        return answer(&stream.current, PANTO_ERROR);
    }
    let (status, item) = first_step(F, stream, consumer, wait);
    // SAFETY: as above.
    unsafe { stream.current.set_item(item) };
    if status != PANTO_EVENT {
        // The end, a failure or nothing within the timeout: as the single call says it.
        return answer(&stream.current, status);
    }
    answer(&stream.current, status);
    let capacity = capacity.min(NEXT_EVENTS_MAX);
    let mut n = 1;
    // The rest of what is ready, never waiting. The end or a failure met here is not
    // delivered in this batch: both are sticky, so the next call answers it (`more`).
    let rest = guard(F, || {
        let extra = if capacity > 1 {
            stream
                .extra
                .get_or_init(|| (1..NEXT_EVENTS_MAX).map(|_| Slot::new()).collect())
                .as_ref()
        } else {
            &[]
        };
        while n < capacity {
            match consumer.stream.try_next() {
                Ok(Next::Event(ev)) => {
                    let slot = &extra[n - 1];
                    // SAFETY: the slots' only writer (above); this slot was emptied by
                    // `start_call` or never filled.
                    unsafe { slot.set_item(Some(Item::Event(ev))) };
                    consumer.extra_used = n;
                    // SAFETY: element `n` < capacity of the caller's array has `size`
                    // writable bytes (contract); nothing replaces the slot meanwhile.
                    unsafe { deliver(at(n), size, slot, PANTO_EVENT) };
                    n += 1;
                }
                // Nothing ready: that look cleared the readiness as PANTO_PENDING does,
                // so the next arrival is reported.
                Ok(Next::Pending) => return false,
                Ok(Next::Done) | Err(_) => return true,
            }
        }
        // Full: look (without waiting) whether anything else is ready, which, when
        // nothing is, leaves the readiness cleared as PANTO_PENDING would.
        consumer.stream.ready_now()
    });
    let ready = match rest {
        Ok(r) => r,
        Err(_) => {
            // The events filled stay valid; the poisoned stream fails from the next call.
            stream.poison();
            true
        }
    };
    // SAFETY: both non-NULL and writable (checked and written above).
    unsafe {
        filled.write(n);
        more.write(ready);
    }
    PANTO_EVENT
}

/// Blocks until the next event, the end, or a failure.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_next_event(
    stream: *mut PantoStream,
    out: *mut PantoEvent,
) -> PantoStatus {
    // SAFETY: the pointers are as panto.h documents them (`next`'s contract).
    unsafe { next("panto_next_event", stream, out, Wait::Forever) }
}

/// Like `panto_next_event`, giving up with `PANTO_PENDING` after `timeout_ms` (0: do not
/// wait at all; negative: no limit).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_next_event_timeout(
    stream: *mut PantoStream,
    out: *mut PantoEvent,
    timeout_ms: i32,
) -> PantoStatus {
    let wait = match timeout_ms {
        t if t < 0 => Wait::Forever,
        0 => Wait::Poll,
        t => Wait::For(Duration::from_millis(t as u64)),
    };
    // SAFETY: the pointers are as panto.h documents them (`next`'s contract).
    unsafe { next("panto_next_event_timeout", stream, out, wait) }
}

/// The canonical JSON of a delivered event (or error), borrowed like the event.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_event_to_json(
    event: *const PantoEvent,
    out: *mut PantoStr,
) -> PantoStatus {
    if out.is_null() {
        return PANTO_ERROR;
    }
    // SAFETY: non-NULL (checked above) and writable (this function's contract).
    unsafe { out.write(PantoStr::ABSENT) };
    // SAFETY: NULL or an event of the caller's, its first 4 bytes readable (contract).
    if unsafe { event_size(event) }.is_none() {
        return PANTO_ERROR;
    }
    // Only this version's prefix is read; the caller's struct may be larger.
    // SAFETY: `event` is non-NULL with an accepted struct_size, so at least this
    // version's PantoEvent is readable there; the fields are read in place, through no
    // reference to the caller's memory.
    let (private, gen, kind) = unsafe {
        (
            std::ptr::addr_of!((*event)._private).read(),
            std::ptr::addr_of!((*event)._private_gen).read(),
            std::ptr::addr_of!((*event).kind).read(),
        )
    };
    // A copy of an event the stream has moved past: its slot holds another generation.
    // SAFETY: `_private` is NULL or was set by `Slot::fill` from a slot of a stream the
    // caller has not freed, and no next call on it runs concurrently (panto.h: the
    // event's lifetime).
    let Some(record) = (unsafe { Slot::record_of(private.cast::<c_void>(), gen) }) else {
        return PANTO_ERROR;
    };
    if record.kind() != kind {
        return PANTO_ERROR;
    }
    match guard("panto_event_to_json", || record.json()) {
        Ok(s) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(s) };
            PANTO_OK
        }
        Err(_) => PANTO_ERROR,
    }
}

/// Fills up to `capacity` events at once: waits like `panto_next_event_timeout` for the
/// first, then takes what else is ready without waiting; `*more` says whether the next
/// call would answer at once (see `panto.h` for the whole contract).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_next_events(
    stream: *mut PantoStream,
    events: *mut PantoEvent,
    capacity: usize,
    timeout_ms: i32,
    filled: *mut usize,
    more: *mut bool,
) -> PantoStatus {
    let wait = match timeout_ms {
        t if t < 0 => Wait::Forever,
        0 => Wait::Poll,
        t => Wait::For(Duration::from_millis(t as u64)),
    };
    // SAFETY: the pointers are as panto.h documents them (`next_events`' contract).
    unsafe { next_events(stream, events, capacity, wait, filled, more) }
}

/// Cancels the turn; any thread, any time, idempotent, never blocks.
///
/// # Safety
/// `stream` is NULL or a live stream.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_cancel(stream: *mut PantoStream) -> PantoStatus {
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    match unsafe { stream.as_ref() } {
        None => PANTO_ERROR,
        Some(s) => match guard("panto_stream_cancel", || s.control.cancel()) {
            Ok(()) => PANTO_OK,
            Err(_) => PANTO_ERROR,
        },
    }
}

/// Answers a host-tool call with text and image parts given as JSON (the input form of
/// `panto_agent_stream_with`'s "input", without documents).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_submit_tool_result_parts(
    stream: *mut PantoStream,
    call_id: *const c_char,
    call_id_len: usize,
    parts_json: *const c_char,
    parts_len: usize,
    is_error: bool,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_stream_submit_tool_result_parts";
    let submit = |stream: &PantoStream, call_id: &str, parts_json: &str| {
        let parts = tool_parts(parts_json, stream.max_file_bytes)
            .map_err(|m| Error::new(ErrorKind::Tool, format!("{F}: {m}")))?;
        stream.control.submit_tool_parts(call_id, parts, is_error)
    };
    // SAFETY: the pointers are as panto.h documents them (`submit_tool_answer`'s
    // contract).
    unsafe {
        submit_tool_answer(
            F,
            stream,
            (call_id, call_id_len),
            ("parts_json", parts_json, parts_len),
            false,
            err,
            submit,
        )
    }
}

/// A tool result's parts from the input form: text and images only (a file is read
/// here, at most `max_file_bytes` of it, so an unreadable path is named in the error).
fn tool_parts(json: &str, max_file_bytes: usize) -> Result<Vec<panto_core::Block>, String> {
    use panto_core::{Block, Input};
    // The input form's messages say `input[i]`; here the array is the parts.
    let rename = |e: Error| match e.message.strip_prefix("input") {
        Some(rest) => format!("parts{rest}"),
        None => e.message,
    };
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("parts: not valid JSON: {e}"))?;
    let input = Input::from_value_limited(&value, max_file_bytes).map_err(rename)?;
    input.check(usize::MAX).map_err(rename)?;
    let parts = input.into_parts();
    if let Some(i) = parts.iter().position(|p| matches!(p, Block::Document(_))) {
        return Err(format!(
            "parts[{i}]: a tool result holds text and images only (no documents)"
        ));
    }
    Ok(parts)
}

/// Answers a host-tool call announced by a `tool_call_start` with `host` set.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_submit_tool_result(
    stream: *mut PantoStream,
    call_id: *const c_char,
    call_id_len: usize,
    output: *const c_char,
    output_len: usize,
    is_error: bool,
    err: *mut *mut PantoError,
) -> PantoStatus {
    // SAFETY: the pointers are as panto.h documents them (`submit_tool_answer`'s
    // contract).
    unsafe {
        submit_tool_answer(
            "panto_stream_submit_tool_result",
            stream,
            (call_id, call_id_len),
            ("output", output, output_len),
            true,
            err,
            |stream, call_id, output| stream.control.submit_tool_result(call_id, output, is_error),
        )
    }
}

/// What the two tool-result calls share: the argument checks (each failure the `tool`
/// kind: misuse of host tools is, DESIGN.md, bad arguments included), the poisoned
/// check, then `submit` with the call id and the payload text under the panic guard (a
/// panic poisons the stream). The payload is `(name, pointer, length)`; a NULL one is
/// refused unless `null_payload_is_empty` (then NULL with length 0 is "").
///
/// # Safety
/// `stream` is NULL or a live stream; the pointers are NULL or valid for their lengths.
unsafe fn submit_tool_answer(
    function: &str,
    stream: *mut PantoStream,
    call_id: (*const c_char, usize),
    payload: (&str, *const c_char, usize),
    null_payload_is_empty: bool,
    err: *mut *mut PantoError,
    submit: impl FnOnce(&PantoStream, &str, &str) -> Result<(), Error>,
) -> PantoStatus {
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    let as_tool = |e: Error| Error::new(ErrorKind::Tool, e.message);
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    let Some(stream) = (unsafe { stream.as_ref() }) else {
        return err.fail(as_tool(invalid(function, "stream is NULL")));
    };
    let (call_id, call_id_len) = call_id;
    let (payload_name, payload, payload_len) = payload;
    if call_id.is_null() {
        return err.fail(as_tool(invalid(function, "call_id is NULL")));
    }
    if payload.is_null() && !null_payload_is_empty {
        return err.fail(as_tool(invalid(
            function,
            format_args!("{payload_name} is NULL"),
        )));
    }
    // SAFETY: non-NULL (checked above), `call_id_len` bytes unchanged during the call
    // (this function's contract).
    let call_id = match unsafe { input_str(function, "call_id", call_id, call_id_len) } {
        Ok(s) => s,
        Err(e) => return err.fail(as_tool(e)),
    };
    // SAFETY: NULL only with null_payload_is_empty (then `input_str` reads nothing for
    // length 0 and refuses another), else `payload_len` bytes unchanged during the call.
    let payload = match unsafe { input_str(function, payload_name, payload, payload_len) } {
        Ok(s) => s,
        Err(e) => return err.fail(as_tool(e)),
    };
    if stream.poisoned.load(Ordering::SeqCst) {
        return err.fail(poisoned(function, "stream"));
    }
    match guard(function, || {
        maybe_panic();
        submit(stream, call_id, payload)
    }) {
        Ok(Ok(())) => PANTO_OK,
        Ok(Err(e)) => err.fail(e),
        Err(panic) => {
            stream.poison();
            err.fail(panic)
        }
    }
}

/// True while a next call on this stream waits for an event (diagnostics, tests).
///
/// # Safety
/// `stream` is NULL or a live stream.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_consumer_waiting(stream: *const PantoStream) -> bool {
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    unsafe { stream.as_ref() }.is_some_and(|s| {
        guard("panto_stream_consumer_waiting", || {
            s.control.consumer_waiting()
        })
        .unwrap_or(false)
    })
}

/// True while the turn is paused because the consumer has not taken its events.
///
/// # Safety
/// `stream` is NULL or a live stream.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_turn_paused(stream: *const PantoStream) -> bool {
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    unsafe { stream.as_ref() }.is_some_and(|s| {
        guard("panto_stream_turn_paused", || s.control.turn_paused()).unwrap_or(false)
    })
}

/// The stream's readiness descriptor: readable while a next call with a timeout of 0
/// would not return `PANTO_PENDING` (see `panto.h` for the whole contract).
///
/// # Safety
/// `stream` is NULL or a live stream; `fd_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_readiness_fd(
    stream: *const PantoStream,
    fd_out: *mut i64,
) -> PantoStatus {
    if fd_out.is_null() {
        return PANTO_ERROR;
    }
    // SAFETY: non-NULL (checked above) and writable (this function's contract).
    unsafe { fd_out.write(-1) };
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    let Some(stream) = (unsafe { stream.as_ref() }) else {
        return PANTO_ERROR;
    };
    if stream.poisoned.load(Ordering::SeqCst) {
        return PANTO_ERROR;
    }
    // SAFETY: `fd_out` is non-NULL and writable (checked and written above).
    unsafe { readiness_fd(stream, fd_out) }
}

/// # Safety
/// `fd_out` is non-NULL and writable.
#[cfg(unix)]
unsafe fn readiness_fd(stream: &PantoStream, fd_out: *mut i64) -> PantoStatus {
    match guard("panto_stream_readiness_fd", || {
        stream.control.readiness_fd()
    }) {
        Ok(Ok(fd)) => {
            // SAFETY: non-NULL and writable (this function's contract).
            unsafe { fd_out.write(i64::from(fd)) };
            PANTO_OK
        }
        Ok(Err(_)) => PANTO_ERROR,
        Err(_) => {
            stream.poison();
            PANTO_ERROR
        }
    }
}

/// No POSIX descriptors here (the header says so).
#[cfg(not(unix))]
unsafe fn readiness_fd(_: &PantoStream, _: *mut i64) -> PantoStatus {
    PANTO_ERROR
}

/// Cancels the turn if it is still running, waits for its task to end (promptly: a
/// cancelled turn stops at its next await), and frees the stream; NULL is a no-op.
///
/// # Safety
/// `stream` is NULL or a live stream that no other thread is using, not used after.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_free(stream: *mut PantoStream) {
    if !stream.is_null() {
        // SAFETY: a live stream from this library (a Box) that no other thread uses and
        // nobody uses after (this function's contract): taken back once.
        let stream = unsafe { Box::from_raw(stream) };
        if stream.control.from_parent_process() {
            // A parent's stream in a forked child: its locks may have been held by a
            // thread that is gone, so nothing of it is touched; the child's copy leaks.
            std::mem::forget(stream);
            return;
        }
        let _ = guard("panto_stream_free", || drop(stream));
    }
}

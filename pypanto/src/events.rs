//! Owns the Python event classes: one frozen class per kind of `panto::Event`, with
//! typed attributes, `type`, `__repr__`, `to_dict()` and `to_json()`. They hold the Rust
//! fields and convert on attribute access, so an event nobody looks at costs one small
//! allocation. `to_json()` rebuilds the core's `Event` and asks it for its canonical
//! JSON, so the Python form cannot drift from the core's.

use panto::{Block, BlockKind, DeltaKind, Event, StopReason, Usage as CoreUsage};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString};
use serde_json::Value;

static JSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let loads = JSON_LOADS.get_or_try_init(py, || {
        py.import("json")?.getattr("loads").map(Bound::unbind)
    })?;
    loads.bind(py).call1((text,))
}

/// A JSON value as the Python objects `json.loads` would give.
pub fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                // Numbers beyond i64/u64 are floats in serde_json (no arbitrary precision).
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, json_to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

fn block_kind(k: BlockKind) -> &'static str {
    match k {
        BlockKind::Text => "text",
        BlockKind::Reasoning => "reasoning",
        BlockKind::ToolCall => "tool_call",
    }
}

fn delta_kind(k: DeltaKind) -> &'static str {
    match k {
        DeltaKind::Text => "text",
        DeltaKind::Reasoning => "reasoning",
        DeltaKind::ToolArgs => "tool_args",
    }
}

fn block_to_py<'py>(py: Python<'py>, b: &Block) -> PyResult<Bound<'py, PyAny>> {
    // Serializing a block (strings and JSON values) cannot fail.
    json_to_py(py, &serde_json::to_value(b).unwrap_or(Value::Null))
}

/// `Name(field=value, …)` from the canonical JSON (without its `type`).
fn repr_of(py: Python<'_>, class: &str, json: &str) -> PyResult<String> {
    let dict = json_loads(py, json)?;
    let dict = dict.cast::<PyDict>()?;
    let mut out = format!("{class}(");
    let mut first = true;
    for (k, v) in dict.iter() {
        let k: String = k.extract()?;
        if k == "type" {
            continue;
        }
        if !first {
            out.push_str(", ");
        }
        first = false;
        out.push_str(&k);
        out.push('=');
        out.push_str(&v.repr()?.to_cow()?);
    }
    out.push(')');
    Ok(out)
}

/// Token usage: of one message (`MessageEnd`) or of the whole turn (`MessageComplete`).
#[pyclass(frozen, module = "panto", name = "Usage")]
#[derive(Clone)]
pub struct Usage {
    #[pyo3(get)]
    input_tokens: u64,
    #[pyo3(get)]
    output_tokens: u64,
    #[pyo3(get)]
    cache_read_tokens: u64,
    #[pyo3(get)]
    cache_write_tokens: u64,
    #[pyo3(get)]
    reasoning_tokens: u64,
}

impl From<CoreUsage> for Usage {
    fn from(u: CoreUsage) -> Usage {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            reasoning_tokens: u.reasoning_tokens,
        }
    }
}

impl Usage {
    fn core(&self) -> CoreUsage {
        CoreUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_tokens,
            cache_write_tokens: self.cache_write_tokens,
            reasoning_tokens: self.reasoning_tokens,
        }
    }
    fn json(&self) -> String {
        serde_json::to_string(&self.core()).unwrap_or_default()
    }
}

#[pymethods]
impl Usage {
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.json())
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr_of(py, "Usage", &self.json())
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Usage>()
            .map(|o| o.get().core() == self.core())
            .unwrap_or(false)
    }
    fn __hash__(&self) -> u64 {
        // Usage is immutable; a hash consistent with __eq__.
        let u = self.core();
        u.input_tokens
            .wrapping_mul(31)
            .wrapping_add(u.output_tokens)
            .wrapping_mul(31)
            .wrapping_add(u.cache_read_tokens)
            .wrapping_mul(31)
            .wrapping_add(u.cache_write_tokens)
            .wrapping_mul(31)
            .wrapping_add(u.reasoning_tokens)
    }
}

/// The methods every event class has; `$extra` adds the class's own getters.
macro_rules! event_class {
    ($ty:ident, $py_name:literal, $type_name:literal, { $($extra:tt)* }) => {
        #[pymethods]
        impl $ty {
            /// The canonical `type` of this event (also a class attribute).
            #[classattr]
            #[pyo3(name = "type")]
            fn type_name() -> &'static str {
                $type_name
            }
            /// The canonical JSON of this event, exactly as the core writes it.
            fn to_json(&self) -> String {
                self.event().to_json()
            }
            /// The canonical JSON form as a dict (`json.loads(self.to_json())`).
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                json_loads(py, &self.to_json())
            }
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                repr_of(py, $py_name, &self.to_json())
            }
            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other
                    .cast::<$ty>()
                    .map(|o| o.get().event() == self.event())
                    .unwrap_or(false)
            }
            $($extra)*
        }
    };
}

/// A provider response began (`message_start`).
#[pyclass(frozen, module = "panto", name = "MessageStart")]
pub struct MessageStart {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    model: String,
    #[pyo3(get)]
    response_id: Option<String>,
}
impl MessageStart {
    fn event(&self) -> Event {
        Event::MessageStart {
            message: self.message,
            model: self.model.clone(),
            response_id: self.response_id.clone(),
        }
    }
}
event_class!(MessageStart, "MessageStart", "message_start", {});

/// A content block opened (`block_start`); `kind` is `text`, `reasoning` or `tool_call`.
#[pyclass(frozen, module = "panto", name = "BlockStart")]
pub struct BlockStart {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    block: u32,
    kind: BlockKind,
}
impl BlockStart {
    fn event(&self) -> Event {
        Event::BlockStart {
            message: self.message,
            block: self.block,
            kind: self.kind,
        }
    }
}
event_class!(BlockStart, "BlockStart", "block_start", {
    #[getter]
    fn kind(&self) -> &'static str {
        block_kind(self.kind)
    }
});

/// A fragment of a block (`content_delta`); `kind` is `text`, `reasoning` or `tool_args`.
#[pyclass(frozen, module = "panto", name = "ContentDelta")]
pub struct ContentDelta {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    block: u32,
    kind: DeltaKind,
    #[pyo3(get)]
    text: String,
}
impl ContentDelta {
    fn event(&self) -> Event {
        Event::ContentDelta {
            message: self.message,
            block: self.block,
            kind: self.kind,
            text: self.text.clone(),
        }
    }
}
event_class!(ContentDelta, "ContentDelta", "content_delta", {
    #[getter]
    fn kind(&self) -> &'static str {
        delta_kind(self.kind)
    }
});

/// The id and name of a tool-call block are known (`tool_details`).
#[pyclass(frozen, module = "panto", name = "ToolDetails")]
pub struct ToolDetails {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    block: u32,
    #[pyo3(get)]
    call_id: String,
    #[pyo3(get)]
    name: String,
}
impl ToolDetails {
    fn event(&self) -> Event {
        Event::ToolDetails {
            message: self.message,
            block: self.block,
            call_id: self.call_id.clone(),
            name: self.name.clone(),
        }
    }
}
event_class!(ToolDetails, "ToolDetails", "tool_details", {});

/// A block closed (`block_complete`); `content` is the assembled block as a dict.
#[pyclass(frozen, module = "panto", name = "BlockComplete")]
pub struct BlockComplete {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    block: u32,
    content: Block,
}
impl BlockComplete {
    fn event(&self) -> Event {
        Event::BlockComplete {
            message: self.message,
            block: self.block,
            content: self.content.clone(),
        }
    }
}
event_class!(BlockComplete, "BlockComplete", "block_complete", {
    #[getter]
    fn content<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        block_to_py(py, &self.content)
    }
});

/// One assistant message ended (`message_end`, not terminal).
#[pyclass(frozen, module = "panto", name = "MessageEnd")]
pub struct MessageEnd {
    #[pyo3(get)]
    message: u32,
    stop_reason: StopReason,
    usage: CoreUsage,
}
impl MessageEnd {
    fn event(&self) -> Event {
        Event::MessageEnd {
            message: self.message,
            stop_reason: self.stop_reason.clone(),
            usage: self.usage,
        }
    }
}
event_class!(MessageEnd, "MessageEnd", "message_end", {
    #[getter]
    fn stop_reason(&self) -> String {
        self.stop_reason.as_string()
    }
    #[getter]
    fn usage(&self) -> Usage {
        self.usage.into()
    }
});

/// Dispatch of one tool call begins (`tool_call_start`). `host` is true when the caller
/// answers it (`Stream.submit_tool_result`); `arguments` is the parsed object, or None
/// with the raw text in `arguments_raw`.
#[pyclass(frozen, module = "panto", name = "ToolCallStart")]
pub struct ToolCallStart {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    call_id: String,
    #[pyo3(get)]
    name: String,
    arguments: Option<Value>,
    #[pyo3(get)]
    arguments_raw: Option<String>,
    #[pyo3(get)]
    host: bool,
}
impl ToolCallStart {
    fn event(&self) -> Event {
        Event::ToolCallStart {
            message: self.message,
            call_id: self.call_id.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            arguments_raw: self.arguments_raw.clone(),
            host: self.host,
        }
    }
}
event_class!(ToolCallStart, "ToolCallStart", "tool_call_start", {
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.arguments {
            Some(v) => json_to_py(py, v),
            None => Ok(py.None().into_bound(py)),
        }
    }
});

/// A tool call finished (`tool_result`).
#[pyclass(frozen, module = "panto", name = "ToolResult")]
pub struct ToolResult {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    call_id: String,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    output: String,
    #[pyo3(get)]
    is_error: bool,
}
impl ToolResult {
    fn event(&self) -> Event {
        Event::ToolResult {
            message: self.message,
            call_id: self.call_id.clone(),
            name: self.name.clone(),
            output: self.output.clone(),
            is_error: self.is_error,
        }
    }
}
event_class!(ToolResult, "ToolResult", "tool_result", {});

/// A request failed before any of its answer was shown and is tried again
/// (`provider_retry`).
#[pyclass(frozen, module = "panto", name = "ProviderRetry")]
pub struct ProviderRetry {
    #[pyo3(get)]
    message: u32,
    #[pyo3(get)]
    attempt: u32,
    #[pyo3(get)]
    max_attempts: u32,
    #[pyo3(get)]
    delay_ms: u64,
    #[pyo3(get)]
    reason: String,
    #[pyo3(get)]
    status: Option<u16>,
}
impl ProviderRetry {
    fn event(&self) -> Event {
        Event::ProviderRetry {
            message: self.message,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            delay_ms: self.delay_ms,
            reason: self.reason.clone(),
            status: self.status,
        }
    }
}
event_class!(ProviderRetry, "ProviderRetry", "provider_retry", {});

/// The turn is over (`message_complete`, terminal): the turn's stop reason, total usage,
/// number of assistant messages and the final assistant message's text.
#[pyclass(frozen, module = "panto", name = "MessageComplete")]
pub struct MessageComplete {
    stop_reason: StopReason,
    usage: CoreUsage,
    #[pyo3(get)]
    messages: u32,
    #[pyo3(get)]
    text: String,
}
impl MessageComplete {
    fn event(&self) -> Event {
        Event::MessageComplete {
            stop_reason: self.stop_reason.clone(),
            usage: self.usage,
            messages: self.messages,
            text: self.text.clone(),
        }
    }
}
event_class!(MessageComplete, "MessageComplete", "message_complete", {
    #[getter]
    fn stop_reason(&self) -> String {
        self.stop_reason.as_string()
    }
    #[getter]
    fn usage(&self) -> Usage {
        self.usage.into()
    }
});

/// Automatic compaction summarized the older history before the next request
/// (`history_compacted`). `tokens_before` comes from the provider's usage when known;
/// `tokens_after` (and `tokens_before` otherwise) is estimated as bytes / 4.
#[pyclass(frozen, module = "panto", name = "HistoryCompacted")]
pub struct HistoryCompacted {
    #[pyo3(get)]
    messages_before: u64,
    #[pyo3(get)]
    messages_after: u64,
    #[pyo3(get)]
    tokens_before: u64,
    #[pyo3(get)]
    tokens_after: u64,
}
impl HistoryCompacted {
    fn event(&self) -> Event {
        Event::HistoryCompacted {
            messages_before: self.messages_before,
            messages_after: self.messages_after,
            tokens_before: self.tokens_before,
            tokens_after: self.tokens_after,
        }
    }
}
event_class!(HistoryCompacted, "HistoryCompacted", "history_compacted", {
});

/// An event of a kind this version of the package does not know (a newer core).
#[pyclass(frozen, module = "panto", name = "UnknownEvent")]
pub struct UnknownEvent {
    event: Event,
}
#[pymethods]
impl UnknownEvent {
    #[getter]
    #[pyo3(name = "type")]
    fn type_name(&self) -> &'static str {
        self.event.type_name()
    }
    fn to_json(&self) -> String {
        self.event.to_json()
    }
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.to_json())
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr_of(py, "UnknownEvent", &self.to_json())
    }
}

/// Whether `ev` announces a call the caller must answer: its call id and name.
pub fn host_call(ev: &Event) -> bool {
    matches!(ev, Event::ToolCallStart { host: true, .. })
}

/// The Python object for an event (moves its fields, no copy of its strings).
pub fn to_py(py: Python<'_>, ev: Event) -> PyResult<Py<PyAny>> {
    Ok(match ev {
        Event::MessageStart {
            message,
            model,
            response_id,
        } => Py::new(
            py,
            MessageStart {
                message,
                model,
                response_id,
            },
        )?
        .into_any(),
        Event::BlockStart {
            message,
            block,
            kind,
        } => Py::new(
            py,
            BlockStart {
                message,
                block,
                kind,
            },
        )?
        .into_any(),
        Event::ContentDelta {
            message,
            block,
            kind,
            text,
        } => Py::new(
            py,
            ContentDelta {
                message,
                block,
                kind,
                text,
            },
        )?
        .into_any(),
        Event::ToolDetails {
            message,
            block,
            call_id,
            name,
        } => Py::new(
            py,
            ToolDetails {
                message,
                block,
                call_id,
                name,
            },
        )?
        .into_any(),
        Event::BlockComplete {
            message,
            block,
            content,
        } => Py::new(
            py,
            BlockComplete {
                message,
                block,
                content,
            },
        )?
        .into_any(),
        Event::MessageEnd {
            message,
            stop_reason,
            usage,
        } => Py::new(
            py,
            MessageEnd {
                message,
                stop_reason,
                usage,
            },
        )?
        .into_any(),
        Event::ToolCallStart {
            message,
            call_id,
            name,
            arguments,
            arguments_raw,
            host,
        } => Py::new(
            py,
            ToolCallStart {
                message,
                call_id,
                name,
                arguments,
                arguments_raw,
                host,
            },
        )?
        .into_any(),
        Event::ToolResult {
            message,
            call_id,
            name,
            output,
            is_error,
        } => Py::new(
            py,
            ToolResult {
                message,
                call_id,
                name,
                output,
                is_error,
            },
        )?
        .into_any(),
        Event::ProviderRetry {
            message,
            attempt,
            max_attempts,
            delay_ms,
            reason,
            status,
        } => Py::new(
            py,
            ProviderRetry {
                message,
                attempt,
                max_attempts,
                delay_ms,
                reason,
                status,
            },
        )?
        .into_any(),
        Event::MessageComplete {
            stop_reason,
            usage,
            messages,
            text,
        } => Py::new(
            py,
            MessageComplete {
                stop_reason,
                usage,
                messages,
                text,
            },
        )?
        .into_any(),
        Event::HistoryCompacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        } => Py::new(
            py,
            HistoryCompacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            },
        )?
        .into_any(),
        other => Py::new(py, UnknownEvent { event: other })?.into_any(),
    })
}

/// Registers the event classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Usage>()?;
    m.add_class::<MessageStart>()?;
    m.add_class::<BlockStart>()?;
    m.add_class::<ContentDelta>()?;
    m.add_class::<ToolDetails>()?;
    m.add_class::<BlockComplete>()?;
    m.add_class::<MessageEnd>()?;
    m.add_class::<ToolCallStart>()?;
    m.add_class::<ToolResult>()?;
    m.add_class::<ProviderRetry>()?;
    m.add_class::<MessageComplete>()?;
    m.add_class::<HistoryCompacted>()?;
    m.add_class::<UnknownEvent>()?;
    Ok(())
}

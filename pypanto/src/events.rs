//! Owns what the Python event classes share. The classes themselves — one frozen class
//! per event of the core's vocabulary, with typed attributes, `type`, `__repr__`, `==`,
//! `to_dict()` and `to_json()`, and the record classes such as `Usage` — are generated
//! into `events_gen.rs` by `scripts/gen.sh` from the core's description. This module
//! holds the conversions they are generated against ([`Field`]), `repr`, the class of an
//! event this package does not know, and the module registration.
//!
//! An event holds the core's fields and converts on attribute access, so an event nobody
//! looks at costs one small allocation. `to_dict()`, `repr()` and `==` read the fields
//! directly (no JSON text); only `to_json()` asks the core for its canonical JSON, so that
//! form cannot drift from the core's.

use panto::{Block, Event, MediaSource};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};
use serde::Serialize;
use serde_json::Value;

use crate::events_gen::register_classes;
pub use crate::events_gen::to_py;

/// A JSON value as the Python objects `json.loads` would give.
pub fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                // Numbers beyond i64/u64 are floats in serde_json (no arbitrary precision).
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
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

/// A value as its canonical JSON form's Python objects, without JSON text: what the core
/// serializes it to, turned into Python directly.
pub fn serialized<'py, T: Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    // Serializing the core's plain data (strings, numbers, JSON values) cannot fail.
    json_to_py(py, &serde_json::to_value(v).unwrap_or(Value::Null))
}

/// How a field of an event becomes Python: `attr` is what the attribute returns,
/// `dict_value` what `to_dict()` holds (the same but for records, which are objects as
/// attributes and dicts in the dict form). The generated classes call these for every
/// field; the generated code implements them for the core's enums and records.
pub trait Field {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
    fn dict_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.attr(py)
    }
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok((*self).into_pyobject(py)?.into_any())
            }
        }
    )*};
}
int_field!(u16, u32, u64);

impl Field for bool {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyBool::new(py, *self).to_owned().into_any())
    }
}

impl Field for f64 {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyFloat::new(py, *self).into_any())
    }
}

impl Field for String {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(py, self).into_any())
    }
}

impl Field for Value {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, self)
    }
}

/// A structured output: Python's `json.loads` of the core's text, so an integer is an
/// exact `int` however long (a `float` for a number with a fraction or an exponent, as
/// `json.loads` gives). A fresh object on every access.
impl Field for panto::JsonText {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import(pyo3::intern!(py, "json"))?
            .getattr(pyo3::intern!(py, "loads"))?
            .call1((self.as_str(),))
    }
}

/// A content block is its canonical JSON object, as a dict.
impl Field for Block {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        serialized(py, self)
    }
}

/// `message_complete.deferred`: a list of `{call_id, name, arguments, reason}` dicts.
impl Field for Vec<panto::DeferredCall> {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        serialized(py, self)
    }
}

/// A tool result's parts: as the attribute, what a Python tool returns — a `str` per text
/// part and a `panto.Image` per image (its bytes as `bytes`, no base64) — and in the dict
/// form the canonical JSON (`{"type":"image","media_type","size","data":<base64>}`).
impl Field for Vec<Block> {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let image = py.import("panto._media")?.getattr("Image")?;
        let list = PyList::empty(py);
        for part in self {
            match part {
                Block::Text { text } => list.append(PyString::new(py, text))?,
                Block::Image(m) => {
                    let kwargs = PyDict::new(py);
                    match &m.source {
                        MediaSource::Bytes { media_type, data } => {
                            kwargs.set_item("data", PyBytes::new(py, data))?;
                            kwargs.set_item("media_type", media_type)?;
                        }
                        MediaSource::Url(url) => {
                            kwargs.set_item("url", url)?;
                            kwargs.set_item("media_type", m.url_media_type.as_deref())?;
                        }
                    }
                    kwargs.set_item("name", m.name.as_deref())?;
                    list.append(image.call((), Some(&kwargs))?)?;
                }
                // A tool result holds text and images only (ToolOutput::with_parts).
                other => list.append(serialized(py, other)?)?,
            }
        }
        Ok(list.into_any())
    }
    fn dict_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &panto::event::tool_parts::to_value(self))
    }
}

/// `None` when absent (or JSON null).
impl<T: Field> Field for Option<T> {
    fn attr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Some(v) => v.attr(py),
            None => Ok(py.None().into_bound(py)),
        }
    }
    fn dict_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Some(v) => v.dict_value(py),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// `Name(field=value, …)` from the dict form (without its `type`): the values' own
/// Python `repr`.
pub fn repr_of(py: Python<'_>, class: &str, dict: &Bound<'_, PyDict>) -> PyResult<String> {
    let type_key = pyo3::intern!(py, "type");
    let mut out = format!("{class}(");
    let mut first = true;
    for (k, v) in dict.iter() {
        if k.eq(type_key)? {
            continue;
        }
        if !first {
            out.push_str(", ");
        }
        first = false;
        out.push_str(&k.cast::<PyString>()?.to_cow()?);
        out.push('=');
        out.push_str(&v.repr()?.to_cow()?);
    }
    out.push(')');
    Ok(out)
}

/// An event of a kind this version of the package does not know (a core newer than the
/// description the classes were generated from). Its `type` is `"unknown"`, a constant
/// like every event class's, so that `ev.type == "…"` narrows a union of events for a
/// type checker; the core's name for it is `event_type` (and `to_dict()["type"]`).
#[pyclass(frozen, module = "panto", name = "UnknownEvent")]
pub struct UnknownEvent {
    event: Event,
}

impl UnknownEvent {
    pub fn new(event: Event) -> UnknownEvent {
        UnknownEvent { event }
    }
}

#[pymethods]
impl UnknownEvent {
    #[classattr]
    #[pyo3(name = "type")]
    fn type_name() -> &'static str {
        "unknown"
    }
    #[classattr]
    fn __match_args__(py: Python<'_>) -> Bound<'_, PyTuple> {
        PyTuple::empty(py)
    }
    /// The event's type as the core names it.
    #[getter]
    fn event_type(&self) -> &'static str {
        self.event.type_name()
    }
    /// The canonical JSON of this event, exactly as the core writes it (its `"type"` is
    /// the core's name for the event).
    fn to_json(&self) -> String {
        self.event.to_json()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<UnknownEvent>() {
            Ok(o) => self.event == o.get().event,
            Err(_) => false,
        }
    }
    fn __hash__(&self) -> u64 {
        hash_str(&self.event.to_json())
    }
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        reduce_event(py, self.event.to_json())
    }
    /// The canonical JSON form as a dict (what `json.loads(self.to_json())` gives).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        serialized(py, &self.event)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let dict = self.to_dict(py)?;
        repr_of(py, "UnknownEvent", dict.cast::<PyDict>()?)
    }
}

/// The hash of an event's canonical JSON (equal events have equal JSON: JSON objects
/// are ordered maps in the core).
pub fn hash_str(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// What `__reduce__` returns for an event: `panto._native._event_from_json` and its
/// canonical JSON, so an event pickles (across processes too) as what the core reads.
pub fn reduce_event(py: Python<'_>, json: String) -> PyResult<(Bound<'_, PyAny>, (String,))> {
    let rebuild = py.import("panto._native")?.getattr("_event_from_json")?;
    Ok((rebuild, (json,)))
}

/// An event from its canonical JSON (what unpickling an event calls).
#[pyfunction]
pub fn _event_from_json(py: Python<'_>, json: &str) -> PyResult<Py<PyAny>> {
    match serde_json::from_str::<Event>(json) {
        Ok(ev) => to_py(py, ev),
        Err(e) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "not the canonical JSON of an event: {e}"
        ))),
    }
}

/// Whether `ev` announces a call the caller must answer.
pub fn host_call(ev: &Event) -> bool {
    matches!(ev, Event::ToolCallStart { host: true, .. })
}

/// Registers the event classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_classes(m)?;
    m.add_class::<UnknownEvent>()?;
    m.add_function(wrap_pyfunction!(_event_from_json, m)?)?;
    Ok(())
}

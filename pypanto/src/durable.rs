//! Owns what makes a Python turn outlive its stream: the `Checkpoint` class (the core's
//! `panto::Checkpoint`, kept as the Rust value: no JSON round trip until `to_json`), the
//! answers to a paused turn's deferred calls as the facade hands them over, and the
//! Python form of steering messages given back. Resuming itself is `Agent.resume`
//! (`agent`), steering `Stream.steer` (`stream`).

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::errors::{to_pyerr, IntoPy};
use crate::events::{serialized, Field};
use crate::text::Text;

/// A turn at a step boundary: `Stream.checkpoint()` returns one; `Agent.resume` continues
/// it, in this process or another. `to_json()` is the versioned document to store;
/// `Checkpoint.from_json(text)` reads one back (`ConfigError` naming the problem for a
/// document that is garbage, tampered with, too large or of a newer version). Holds no
/// API key or header secret. Pickles as its JSON.
#[pyclass(frozen, module = "panto", name = "Checkpoint")]
pub struct Checkpoint {
    pub(crate) inner: panto::Checkpoint,
}

#[pymethods]
impl Checkpoint {
    /// The document as JSON text (`{"panto_checkpoint": 1, …}`).
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    /// Reads a document written by `to_json()` of this or an older panto. `ConfigError`
    /// naming the problem for anything else (not JSON, not a checkpoint, a newer
    /// version, more than 64 MiB, parts that disagree).
    #[staticmethod]
    fn from_json(py: Python<'_>, text: Text<'_>) -> PyResult<Checkpoint> {
        // Parsing a large document takes a while: not with the GIL.
        let text: &str = &text;
        let inner = py
            .detach(|| panto::Checkpoint::from_json(text))
            .py_err(py)?;
        Ok(Checkpoint { inner })
    }

    /// The calls the turn waits for (empty unless it paused): each a dict
    /// `{"call_id", "name", "arguments", "reason"}`, reason `"approval"`, `"external"`
    /// or `"deferred"`, as in `MessageComplete.deferred`.
    #[getter]
    fn deferred<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.deferred().attr(py)
    }

    /// The number of assistant messages of the turn so far.
    #[getter]
    fn steps(&self) -> u32 {
        self.inner.steps()
    }

    fn __repr__(&self) -> String {
        let deferred = self.inner.deferred().len();
        format!(
            "<panto.Checkpoint steps={} deferred={deferred}>",
            self.inner.steps()
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Checkpoint>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    /// Pickles as its JSON, read back by `from_json`.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let from_json = py.get_type::<Checkpoint>().getattr("from_json")?;
        let json = PyString::new(py, &slf.get().inner.to_json());
        PyTuple::new(
            py,
            [from_json.into_any(), PyTuple::new(py, [json])?.into_any()],
        )
    }
}

/// One answer as the facade hands it over: `(call_id, kind, text, parts, is_error)`,
/// kind `"approve"`, `"reject"` (text: the reason) or `"result"` (text: the output, or
/// `parts`: `str` and `panto.Image` items in order).
pub(crate) type NativeAnswer<'py> = (
    String,
    String,
    Option<Bound<'py, PyAny>>,
    Option<Vec<Bound<'py, PyAny>>>,
    bool,
);

/// The answers to a paused turn's deferred calls, from the facade's tuples.
pub(crate) fn answers(py: Python<'_>, given: Vec<NativeAnswer<'_>>) -> PyResult<panto::Answers> {
    let mut answers = panto::Answers::new();
    for (call_id, kind, text, parts, is_error) in given {
        let text: String = match &text {
            Some(t) => t.extract::<Text<'_>>()?.to_owned(),
            None => String::new(),
        };
        answers = match kind.as_str() {
            "approve" => answers.approve(call_id),
            "reject" => answers.reject(call_id, text),
            "result" => {
                let output = match parts {
                    Some(parts) => panto::ToolOutput::with_parts(
                        crate::stream::tool_parts(py, parts)?,
                        is_error,
                    ),
                    None => panto::ToolOutput {
                        output: text,
                        is_error,
                        parts: Vec::new(),
                    },
                };
                answers.result(call_id, output)
            }
            other => {
                return Err(to_pyerr(
                    py,
                    panto::Error::config(format!(
                        "answers.{call_id}: unknown answer kind {other:?} (approve, reject, result)"
                    )),
                ))
            }
        };
    }
    Ok(answers)
}

/// A steering message given back: its text alone when it has no attachment, else its
/// parts (`str`, `panto.Image`, and a document as its canonical JSON dict).
pub(crate) fn input_to_py<'py>(
    py: Python<'py>,
    input: panto::Input,
) -> PyResult<Bound<'py, PyAny>> {
    if !input.has_attachments() {
        let text: Vec<&str> = input
            .parts()
            .iter()
            .filter_map(|b| match b {
                panto::Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        return Ok(PyString::new(py, &text.join("\n")).into_any());
    }
    let list = PyList::empty(py);
    for part in input.into_parts() {
        match part {
            panto::Block::Document(_) => list.append(serialized(py, &part)?)?,
            other => {
                let one = vec![other].attr(py)?;
                for item in one.try_iter()? {
                    list.append(item?)?;
                }
            }
        }
    }
    Ok(list.into_any())
}

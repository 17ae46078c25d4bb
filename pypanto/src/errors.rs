//! Owns the mapping of the core's one error type onto Python exceptions. The classes
//! themselves live in Python (`panto/_errors.py`): abi3 below CPython 3.12 cannot
//! subclass `Exception` from Rust with fields, and Python classes pickle naturally.
//! This module only builds instances of them from a `panto::Error`.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static FROM_NATIVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The Python exception for a core error: the `PantoError` subclass of its kind, with
/// `kind`, `message`, `status`, `retryable`, `provider_code`, `retry_after`,
/// `request_id`, `headers` and `output` set (the class of its HTTP status where there is a
/// narrower one).
/// The core has already removed every secret from the message and the provider code.
pub fn to_pyerr(py: Python<'_>, e: panto::Error) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let make = FROM_NATIVE.get_or_try_init(py, || {
            py.import("panto._errors")?
                .getattr("_from_native")
                .map(Bound::unbind)
        })?;
        let exc = make.bind(py).call1((
            e.kind.as_str(),
            e.message.as_str(),
            e.status,
            e.retryable,
            e.provider_code.as_deref(),
            e.retry_after_ms,
            e.request_id.as_deref(),
            &e.headers,
            e.output(),
        ))?;
        Ok(PyErr::from_value(exc))
    };
    // Building the exception can only fail if the Python package is broken or memory is
    // out; the failure to build it is then the more useful error to report.
    build().unwrap_or_else(|failure| failure)
}

/// A `Result` from the core, with its error turned into the Python exception.
pub trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, panto::Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}

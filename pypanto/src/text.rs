//! Owns how Python text becomes Rust text. A Python `str` may hold lone surrogates
//! (`"\ud800"`: from `surrogateescape`-decoded bytes, a sliced emoji, JSON with a bad
//! escape), which UTF-8 cannot encode; PyO3's `&str` then raises `UnicodeEncodeError`.
//! Everything that crosses into the core — a prompt, a tool's output, a history, the
//! configuration — is taken as [`Text`] instead, so such a string is never refused:
//! each lone surrogate becomes U+FFFD, and two surrogate code points that form a pair
//! become the character they encode (as a JSON `\ud83d\ude00` escape would). A string
//! without surrogates is borrowed as is, at the cost of `&str`.

use std::borrow::Cow;
use std::ops::Deref;

use pyo3::exceptions::PyUnicodeEncodeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A Python `str` argument as UTF-8, lone surrogates replaced by U+FFFD.
pub struct Text<'a>(Cow<'a, str>);

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Text<'a> {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match <&'a str>::extract(ob) {
            Ok(s) => Ok(Text(Cow::Borrowed(s))),
            Err(e) if e.is_instance_of::<PyUnicodeEncodeError>(ob.py()) => {
                Ok(Text(Cow::Owned(replace_surrogates(&ob)?)))
            }
            Err(e) => Err(e),
        }
    }
}

/// The string through UTF-16, where a lone surrogate is one unit that
/// `from_utf16_lossy` replaces (through UTF-8 with `surrogatepass`, it would be three
/// invalid bytes and three replacement characters).
fn replace_surrogates(ob: &Borrowed<'_, '_, PyAny>) -> PyResult<String> {
    let encoded = ob.call_method1("encode", ("utf-16-le", "surrogatepass"))?;
    let bytes = encoded.cast::<PyBytes>()?.as_bytes();
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    Ok(String::from_utf16_lossy(&units))
}

//! Owns the native calls that ask an agent's MCP servers for their resources and
//! prompts outside a turn (`Agent.mcp_resources()` and the rest in Python): each blocks
//! on `panto_pull::mcp` with the GIL released (the work runs on the agent's worker
//! thread), cancellable through a `CancelToken`, and answers the core's JSON text, which
//! the Python layer parses.

use pyo3::prelude::*;

use crate::agent::{Agent, CancelToken};
use crate::errors::{to_pyerr, IntoPy};
use crate::text::Text;

/// The token of `cancel` (a fresh one for none); a token already cancelled is a
/// `CancelledError` at once, with nothing sent.
fn token(py: Python<'_>, cancel: Option<&CancelToken>) -> PyResult<panto::CancellationToken> {
    let token = cancel.map(|c| c.token.clone()).unwrap_or_default();
    if token.is_cancelled() {
        return Err(to_pyerr(py, panto::Error::cancelled()));
    }
    Ok(token)
}

/// What the four calls share: the agent checked usable, `server` copied out of Python,
/// the token of `cancel`, then `call` blocking on `panto_pull::mcp` with the GIL
/// released, its error raised as the Python exception of its kind.
fn blocking(
    py: Python<'_>,
    agent: &Agent,
    server: Option<Text<'_>>,
    cancel: Option<&CancelToken>,
    call: impl FnOnce(&panto::Agent, Option<&str>, &panto::CancellationToken) -> panto::Result<String>
        + Send,
) -> PyResult<String> {
    let agent = agent.usable(py)?.clone();
    let server = server.map(|s| s.to_string());
    let cancel = token(py, cancel)?;
    py.detach(move || call(&agent, server.as_deref(), &cancel))
        .py_err(py)
}

/// The resources of the agent's MCP server `server` (every server's when `None`), as
/// the core's JSON array.
#[pyfunction]
#[pyo3(signature = (agent, server = None, cancel = None))]
fn mcp_resources(
    py: Python<'_>,
    agent: &Agent,
    server: Option<Text<'_>>,
    cancel: Option<&CancelToken>,
) -> PyResult<String> {
    blocking(py, agent, server, cancel, panto_pull::mcp::mcp_resources)
}

/// Reads the resource `uri`, as the core's JSON (`{"contents": [...]}`).
#[pyfunction]
#[pyo3(signature = (agent, uri, server = None, cancel = None))]
fn mcp_read_resource(
    py: Python<'_>,
    agent: &Agent,
    uri: Text<'_>,
    server: Option<Text<'_>>,
    cancel: Option<&CancelToken>,
) -> PyResult<String> {
    let uri = uri.to_string();
    blocking(py, agent, server, cancel, move |agent, server, cancel| {
        panto_pull::mcp::mcp_read_resource(agent, server, &uri, cancel)
    })
}

/// The prompts of the agent's MCP server `server` (every server's when `None`), as the
/// core's JSON array.
#[pyfunction]
#[pyo3(signature = (agent, server = None, cancel = None))]
fn mcp_prompts(
    py: Python<'_>,
    agent: &Agent,
    server: Option<Text<'_>>,
    cancel: Option<&CancelToken>,
) -> PyResult<String> {
    blocking(py, agent, server, cancel, panto_pull::mcp::mcp_prompts)
}

/// The prompt `name` filled in with `arguments_json` (a JSON object of strings), as the
/// core's JSON (`{"description"?, "messages": [...]}`).
#[pyfunction]
#[pyo3(signature = (agent, name, arguments_json = None, server = None, cancel = None))]
fn mcp_get_prompt(
    py: Python<'_>,
    agent: &Agent,
    name: Text<'_>,
    arguments_json: Option<Text<'_>>,
    server: Option<Text<'_>>,
    cancel: Option<&CancelToken>,
) -> PyResult<String> {
    let name = name.to_string();
    let arguments = arguments_json.map(|a| a.to_string());
    blocking(py, agent, server, cancel, move |agent, server, cancel| {
        panto_pull::mcp::mcp_get_prompt(agent, server, &name, arguments.as_deref(), cancel)
    })
}

/// Adds the functions to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mcp_resources, m)?)?;
    m.add_function(wrap_pyfunction!(mcp_read_resource, m)?)?;
    m.add_function(wrap_pyfunction!(mcp_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(mcp_get_prompt, m)?)?;
    Ok(())
}

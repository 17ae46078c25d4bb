//! Owns what the Python host lends an agent's MCP servers for their own requests: a
//! sampling approver and an elicitation answerer, Python callables taking the request
//! as the core's JSON (`McpSamplingRequest::to_json`, `McpElicitationRequest::to_json`).
//! The typed facade (`panto.SamplingApproval`, `panto.ElicitationPrompt`) wraps
//! the host's functions into these. They are called on the library's threads, with the
//! GIL taken there.

use std::sync::Arc;

use pyo3::prelude::*;

/// The core's hooks calling `approve(request_json) -> bool` and
/// `elicit(request_json) -> answer_json`. An exception of `approve` refuses the request
/// (and is reported as unraisable); one of `elicit`, or an answer that is not an
/// answer's JSON, cancels the elicitation.
pub(crate) fn client_hooks(
    approve: Option<Py<PyAny>>,
    elicit: Option<Py<PyAny>>,
) -> panto::McpClientHooks {
    let approve_sampling = approve.map(|f| {
        Arc::new(move |r: &panto::McpSamplingRequest| {
            Python::attach(|py| match f.bind(py).call1((r.to_json(),)) {
                Ok(v) => v.is_truthy().unwrap_or(false),
                Err(e) => {
                    e.write_unraisable(py, Some(f.bind(py)));
                    false
                }
            })
        }) as panto::McpApproveSampling
    });
    let elicit = elicit.map(|f| {
        Arc::new(move |r: &panto::McpElicitationRequest| {
            Python::attach(|py| {
                let answer = f
                    .bind(py)
                    .call1((r.to_json(),))
                    .and_then(|v| v.extract::<String>());
                match answer {
                    Ok(text) => panto::McpElicitationAnswer::from_json(&text)
                        .unwrap_or(panto::McpElicitationAnswer::Cancel),
                    Err(e) => {
                        e.write_unraisable(py, Some(f.bind(py)));
                        panto::McpElicitationAnswer::Cancel
                    }
                }
            })
        }) as panto::McpElicit
    });
    panto::McpClientHooks {
        approve_sampling,
        elicit,
    }
}

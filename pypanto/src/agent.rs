//! Owns the native `Agent`: a `panto::Agent` built from the core's JSON configuration
//! (the Python layer turns keyword arguments into that JSON; the core validates it and
//! names the bad key), its conversation, and the start of a turn as a `Stream`.

use panto::TurnOptions;
use panto_pull::AgentStreamExt;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::durable::{Checkpoint, NativeAnswer};
use crate::errors::{to_pyerr, IntoPy};
use crate::stream::Stream;
use crate::text::Text;

#[pyclass(frozen, module = "panto._native", name = "Agent")]
pub struct Agent {
    agent: panto::Agent,
}

impl Agent {
    /// In a forked child, an agent of the parent cannot be used: its turns and locks
    /// belonged to threads that do not exist there (agents made in the child work: the
    /// pull adapter starts a pool of its own there). Checked before anything takes one of
    /// the agent's locks.
    pub(crate) fn usable(&self, py: Python<'_>) -> PyResult<&panto::Agent> {
        if panto_pull::agent_from_parent_process(&self.agent) {
            return Err(to_pyerr(
                py,
                panto::Error::config(
                    "this Agent was made before the process forked: panto's threads do not \
                     survive fork(), so it cannot be used in the child; make a new Agent \
                     in the child (with multiprocessing's fork start method too)",
                ),
            ));
        }
        Ok(&self.agent)
    }
}

/// A Python token store (`panto.MCPTokenStore`) as the core's.
struct PyTokenStore(Py<PyAny>);

impl panto::McpTokenStore for PyTokenStore {
    fn load(&self, server_url: &str) -> Option<String> {
        Python::attach(|py| {
            self.0
                .bind(py)
                .call_method1("load", (server_url,))
                .ok()
                .and_then(|v| v.extract::<Option<String>>().ok())
                .flatten()
        })
    }

    fn save(&self, server_url: &str, tokens: &str) {
        Python::attach(|py| {
            if let Err(e) = self.0.bind(py).call_method1("save", (server_url, tokens)) {
                e.write_unraisable(py, Some(self.0.bind(py)));
            }
        });
    }
}

/// A set of MCP servers shared by several agents (`panto.MCPServers`): started at the
/// first turn of any of them, stopped by `close()` or when the set and its agents are
/// gone.
#[pyclass(frozen, module = "panto._native", name = "McpServers")]
pub struct McpServers {
    set: panto::McpServers,
}

#[pymethods]
impl McpServers {
    /// The servers of `servers_json`, an object of `mcp_servers` entries by name.
    #[new]
    fn new(py: Python<'_>, servers_json: Text<'_>) -> PyResult<McpServers> {
        let value: serde_json::Value = serde_json::from_str(&servers_json).map_err(|e| {
            to_pyerr(
                py,
                panto::Error::config(format!("mcp_servers: not valid JSON: {e}")),
            )
        })?;
        let Some(obj) = value.as_object() else {
            return Err(to_pyerr(
                py,
                panto::Error::config("mcp_servers: must be an object of servers by name"),
            ));
        };
        let mut servers = std::collections::BTreeMap::new();
        for (name, v) in obj {
            servers.insert(
                name.clone(),
                panto::McpServer::from_value(name, v).py_err(py)?,
            );
        }
        let set = panto::McpServers::new(servers).py_err(py)?;
        Ok(McpServers { set })
    }

    /// Stops the servers now; agents using them fail their next turn.
    fn close(&self) {
        self.set.close();
    }

    /// The servers' names.
    fn names(&self) -> Vec<String> {
        self.set.configs().keys().cloned().collect()
    }
}

/// An attachment as `panto.Image` / `panto.Document` hand it over: kind, data, url,
/// media type, name.
type NativePart<'py> = (
    String,
    Option<Bound<'py, PyAny>>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The parts of `Agent.stream(parts=…)` as a core `Input`.
pub(crate) fn input_parts(py: Python<'_>, parts: &[Bound<'_, PyAny>]) -> PyResult<panto::Input> {
    use pyo3::types::{PyBytes, PyString};
    let mut input = panto::Input::new();
    for (i, part) in parts.iter().enumerate() {
        if part.is_instance_of::<PyString>() {
            let text: Text<'_> = part.extract()?;
            input = input.text(&*text);
            continue;
        }
        let bad = |why: &str| to_pyerr(py, panto::Error::config(format!("input[{i}]: {why}")));
        let (kind, data, url, media_type, name): NativePart<'_> = part
            .extract()
            .map_err(|_| bad("a part is a str, a panto.Image or a panto.Document"))?;
        let mut media = match (data, url) {
            (Some(data), None) => {
                let bytes = data
                    .cast::<PyBytes>()
                    .map_err(|_| bad("the data must be bytes"))?
                    .as_bytes()
                    .to_vec();
                panto::Media::bytes(bytes, media_type.as_deref()).map_err(|e| {
                    let what = name
                        .as_deref()
                        .map(|n| format!("{n}: "))
                        .unwrap_or_default();
                    bad(&format!("{what}{}", e.message))
                })?
            }
            (None, Some(url)) => {
                let mut m = panto::Media::url(url);
                m.url_media_type = media_type;
                m
            }
            _ => return Err(bad("an attachment has exactly one of data and url")),
        };
        media.name = name;
        input = match kind.as_str() {
            "image" => input.image(media),
            "document" => input.document(media),
            _ => return Err(bad("the attachment kinds are image and document")),
        };
    }
    Ok(input)
}

#[pymethods]
impl Agent {
    /// An agent from the core's JSON configuration (`panto::Config::from_json`), using
    /// the shared MCP servers `mcp` if given.
    #[new]
    #[pyo3(signature = (config_json, mcp = None))]
    fn new(
        py: Python<'_>,
        config_json: Text<'_>,
        mcp: Option<PyRef<'_, McpServers>>,
    ) -> PyResult<Agent> {
        let agent = match mcp {
            None => panto::Agent::from_json(&config_json).py_err(py)?,
            Some(m) => {
                let config = panto::Config::from_json(&config_json).py_err(py)?;
                panto::Agent::with_mcp_servers(config, m.set.clone()).py_err(py)?
            }
        };
        Ok(Agent { agent })
    }

    /// Lends the OAuth of the agent's MCP servers a token store (an object with
    /// `load(url) -> str | None` and `save(url, text)`) and a URL opener (a callable
    /// taking the URL). They are called on the library's threads, with the GIL taken
    /// there; an exception of `load` counts as nothing saved, of `save` is ignored, and
    /// of `open_url` fails the sign-in (`AuthenticationError`).
    #[pyo3(signature = (store = None, open_url = None))]
    fn set_mcp_oauth(
        &self,
        py: Python<'_>,
        store: Option<Py<PyAny>>,
        open_url: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let agent = self.usable(py)?;
        let Some(set) = agent.mcp_servers() else {
            return Err(to_pyerr(
                py,
                panto::Error::config(
                    "mcp_token_store, mcp_open_url: the agent has no MCP servers (mcp_servers)",
                ),
            ));
        };
        let store = store.map(|s| Arc::new(PyTokenStore(s)) as Arc<dyn panto::McpTokenStore>);
        let open_url = open_url.map(|f| {
            Arc::new(move |url: &str| {
                Python::attach(|py| {
                    f.bind(py).call1((url,)).map(|_| ()).map_err(|e| {
                        panto::Error::new(
                            panto::ErrorKind::Authentication,
                            format!("mcp_open_url raised {e}: no one could sign in"),
                        )
                    })
                })
            }) as panto::McpOpenUrl
        });
        set.set_oauth_hooks(panto::McpOAuthHooks { store, open_url });
        Ok(())
    }

    /// Lends the agent's MCP servers the host's answers to their own requests:
    /// `approve_sampling(request_json) -> bool` for a server whose `sampling` is enabled
    /// (without it every such request is answered), `elicit(request_json) ->
    /// answer_json` for one whose `elicitation` is (without it every elicitation is
    /// declined). See `mcp_sampling`.
    #[pyo3(signature = (approve_sampling = None, elicit = None))]
    fn set_mcp_client_hooks(
        &self,
        py: Python<'_>,
        approve_sampling: Option<Py<PyAny>>,
        elicit: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let agent = self.usable(py)?;
        let Some(set) = agent.mcp_servers() else {
            return Err(to_pyerr(
                py,
                panto::Error::config(
                    "mcp_approve_sampling, mcp_elicit: the agent has no MCP servers (mcp_servers)",
                ),
            ));
        };
        set.set_client_hooks(crate::mcp_sampling::client_hooks(approve_sampling, elicit));
        Ok(())
    }

    /// Starts a turn: appends `input` as a user message and returns its stream.
    /// `on_host_call` is called with each `ToolCallStart(host=True)` before it is handed
    /// out. Raises `BusyError` if this agent already has an active stream.
    /// `reasoning_json` is the per-turn reasoning control as the core's JSON
    /// (`{"effort": …, "budget_tokens": …}`).
    ///
    /// `parts`, when given, is the input as text and attachments instead of `input`
    /// (which is then ignored): each a `str` (text) or a tuple `(kind, data, url,
    /// media_type, name)` — kind `"image"` or `"document"`, `data` bytes or `url` a
    /// string (exactly one), `media_type` and `name` optional (the type is sniffed from
    /// the bytes when absent).
    ///
    /// `output_schema_json` is the turn's `output_schema` option as JSON: a schema
    /// object, `false` (none for this turn) or `null` (the agent's); the core checks it.
    ///
    /// `defer_tools` defers every tool call: the turn pauses with them (stop reason
    /// `deferred`) instead of running them, to be resumed with their answers.
    #[pyo3(signature = (input, model = None, on_host_call = None, reasoning_json = None, parts = None, output_schema_json = None, defer_tools = false))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        input: Text<'_>,
        model: Option<Text<'_>>,
        on_host_call: Option<Py<PyAny>>,
        reasoning_json: Option<Text<'_>>,
        parts: Option<Vec<Bound<'_, PyAny>>>,
        output_schema_json: Option<Text<'_>>,
        defer_tools: bool,
    ) -> PyResult<Stream> {
        let agent = self.usable(py)?;
        let reasoning = match reasoning_json {
            None => None,
            Some(json) => {
                let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
                    to_pyerr(
                        py,
                        panto::Error::config(format!("reasoning: not valid JSON: {e}")),
                    )
                })?;
                Some(panto::Reasoning::from_value(&value, "reasoning").py_err(py)?)
            }
        };
        let input = match parts {
            None => panto::Input::from(&*input),
            Some(parts) => input_parts(py, &parts)?,
        };
        // The output schema goes through the core's own reading of the turn options, so
        // its checks and messages are the C ABI's (`options.output_schema: …`).
        let mut options = match output_schema_json {
            None => TurnOptions::default(),
            Some(json) => {
                TurnOptions::from_json(&format!("{{\"output_schema\":{}}}", &*json)).py_err(py)?
            }
        };
        options.model = model.map(|m| m.to_owned());
        options.reasoning = reasoning;
        options.defer_tools = defer_tools;
        let stream = agent.stream_with(input, options).py_err(py)?;
        Ok(Stream::new(stream, on_host_call))
    }

    /// Continues the turn `checkpoint` holds as a new stream (see
    /// `panto_pull::resume`), with `answers` to its deferred calls (the facade's
    /// tuples, `durable::NativeAnswer`). The agent's history becomes the checkpoint's
    /// conversation. `ConfigError` for answers that do not fit the checkpoint, or a
    /// checkpoint past this agent's limits or needing a tool it lacks; `BusyError`
    /// while a stream of this agent is active.
    #[pyo3(signature = (checkpoint, answers, on_host_call = None))]
    fn resume(
        &self,
        py: Python<'_>,
        checkpoint: &Checkpoint,
        answers: Vec<NativeAnswer<'_>>,
        on_host_call: Option<Py<PyAny>>,
    ) -> PyResult<Stream> {
        let agent = self.usable(py)?;
        let answers = crate::durable::answers(py, answers)?;
        let stream = panto_pull::resume(agent, checkpoint.inner.clone(), answers).py_err(py)?;
        Ok(Stream::new(stream, on_host_call))
    }

    /// Compacts the conversation (see `panto::Agent::compact`), with the GIL released
    /// while the provider writes the summary; returns the result as the core's JSON.
    /// `options_json` is `{"keep_last"?, "model"?, "prompt"?}`. Cancelling `cancel` from
    /// another thread ends the call with `CancelledError`, the conversation untouched;
    /// a token already cancelled sends nothing.
    #[pyo3(signature = (options_json, cancel = None))]
    fn compact(
        &self,
        py: Python<'_>,
        options_json: Text<'_>,
        cancel: Option<&CancelToken>,
    ) -> PyResult<String> {
        let agent = self.usable(py)?.clone();
        let options = panto::CompactOptions::from_json(&options_json).py_err(py)?;
        let cancel = cancel.map(|c| c.token.clone()).unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(to_pyerr(py, panto::Error::cancelled()));
        }
        let done = py
            .detach(move || panto_pull::compact_cancellable(&agent, &options, &cancel))
            .py_err(py)?;
        Ok(done.to_json())
    }

    /// Calls one tool of the agent's MCP servers outside a turn (see
    /// `panto::Agent::call_mcp_tool`), with the GIL released while the server works;
    /// returns the result as JSON, `{"output", "is_error", "parts"?}`. `arguments_json`
    /// is a JSON object. Cancelling `cancel` from another thread ends the call with
    /// `CancelledError`; a token already cancelled sends nothing.
    #[pyo3(signature = (name, arguments_json, cancel = None))]
    fn call_mcp_tool(
        &self,
        py: Python<'_>,
        name: Text<'_>,
        arguments_json: Text<'_>,
        cancel: Option<&CancelToken>,
    ) -> PyResult<String> {
        let agent = self.usable(py)?.clone();
        let arguments: serde_json::Value = serde_json::from_str(&arguments_json)
            .map_err(|e| {
                panto::Error::config(format!("call_mcp_tool: the arguments are not JSON: {e}"))
            })
            .py_err(py)?;
        let cancel = cancel.map(|c| c.token.clone()).unwrap_or_default();
        let name = String::from(&*name);
        let out = py
            .detach(move || panto_pull::call_mcp_tool(&agent, &name, arguments, &cancel))
            .py_err(py)?;
        Ok(out.to_json())
    }

    /// The tokens of the request a turn with `input` would send now, as the core's JSON
    /// (`{"tokens": n, "estimated": bool}`); blocks without the GIL for the provider's
    /// count.
    fn count_tokens(&self, py: Python<'_>, input: Text<'_>) -> PyResult<String> {
        let agent = self.usable(py)?.clone();
        let input = input.to_string();
        let count = py
            .detach(move || panto_pull::count_tokens(&agent, input))
            .py_err(py)?;
        Ok(count.to_json())
    }

    /// The transcript as the core's JSON array.
    fn transcript_json(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.usable(py)?.transcript_json())
    }

    /// The conversation as the core's versioned JSON.
    fn history_json(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.usable(py)?.history_json())
    }

    /// Replaces the conversation with a saved one (validated by the core).
    fn load_history_json(&self, py: Python<'_>, json: Text<'_>) -> PyResult<()> {
        self.usable(py)?.load_history_json(&json).py_err(py)
    }

    fn clear_history(&self, py: Python<'_>) -> PyResult<()> {
        self.usable(py)?.clear_history().py_err(py)
    }

    #[getter]
    fn provider(&self) -> &'static str {
        self.agent.config().provider.as_str()
    }

    #[getter]
    fn model(&self) -> String {
        self.agent.config().model.clone()
    }

    #[getter]
    fn base_url(&self) -> String {
        self.agent.config().base_url.clone()
    }

    /// The configured tool timeout (the default when none was given): Python tools are
    /// cancelled when it passes, as the core gives up on their calls then.
    #[getter]
    fn tool_timeout_ms(&self) -> u64 {
        self.agent.config().tool_timeout_ms
    }
}

/// Cancels a blocking native call (`Agent.compact`, the MCP calls) from any thread. Made before the
/// call, so a cancel that races the call's start is not lost; cancelling is for good.
#[pyclass(frozen, module = "panto._native", name = "CancelToken")]
#[derive(Default)]
pub struct CancelToken {
    pub(crate) token: panto::CancellationToken,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Never blocks; any thread; idempotent.
    fn cancel(&self) {
        self.token.cancel();
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

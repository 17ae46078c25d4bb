//! Owns the provider-neutral terms of a request: the tools declared to the model
//! ([`ToolSpec`]), reasoning control ([`Reasoning`], [`Effort`]), how a structured
//! answer is asked for ([`OutputMode`]), and which OpenAI-compatible server is on the
//! other end ([`Compat`]), with the request fields that follow from it decided once per
//! agent ([`Dialect`]).
//!
//! `config` reads these from the user and `provider` writes them on the wire; both
//! depend on this module, which depends on neither. Reading them from JSON is
//! `config`'s job, encoding them `provider`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_keys::config_keys;

config_keys! {
    /// A tool as declared to the model (in the configuration: `tools[i]`, a host tool).
    #[derive(Clone, PartialEq, Serialize, Deserialize)]
    pub struct ToolSpec in pub(crate) const TOOL_KEYS {
        /// The tool's name, as the model calls it: 1 to 64 ASCII letters, digits, _ or -.
        pub name: String = String::new(), key(required());
        /// What the tool does, for the model.
        #[serde(default)]
        pub description: String = String::new();
        /// JSON Schema of the tool's arguments object; its "type" must be "object".
        #[serde(default = "empty_object_schema")]
        pub parameters: Value = empty_object_schema();
        /// A call pauses the turn (stop reason deferred) until it is approved or rejected on resume.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub needs_approval: bool = false;
        /// The tool runs outside panto: a call pauses the turn until its result is given on resume.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub external: bool = false;
    }
}

/// The longest tool name the providers accept (OpenAI and Anthropic alike).
pub const MAX_TOOL_NAME_LEN: usize = 64;

impl ToolSpec {
    /// Checks the declaration against what the providers accept, so a bad tool is a
    /// `config` error when it is registered rather than a 400 at the first request: a
    /// name of 1 to 64 ASCII letters, digits, `_` or `-` (`^[a-zA-Z0-9_-]{1,64}$`), and
    /// parameters that are a JSON Schema of an object (`"type": "object"`: a call's
    /// arguments are always an object). `Err` names the field (`name` or `parameters`)
    /// and what is wrong with it; the caller names the tool.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let name = &self.name;
        if name.is_empty() {
            return Err(("name", "required".to_owned()));
        }
        if self.external && self.needs_approval {
            return Err((
                "external",
                "an external tool is answered on resume; it cannot also need approval \
                 (needs_approval)"
                    .to_owned(),
            ));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if name.len() > MAX_TOOL_NAME_LEN || !name.chars().all(allowed) {
            return Err((
                "name",
                format!(
                    "{:?} is not a valid tool name: providers accept 1 to \
                     {MAX_TOOL_NAME_LEN} ASCII letters, digits, '_' or '-'",
                    crate::text::truncate(name, 100)
                ),
            ));
        }
        let what = match &self.parameters {
            Value::Object(schema) => match schema.get("type") {
                Some(Value::String(t)) if t == "object" => return Ok(()),
                Some(t) => format!(
                    "has \"type\": {}",
                    crate::text::truncate(&t.to_string(), 60)
                ),
                None => "has no \"type\"".to_owned(),
            },
            Value::Null => "is null".to_owned(),
            Value::Bool(_) => "is a boolean".to_owned(),
            Value::Number(_) => "is a number".to_owned(),
            Value::String(_) => "is a string".to_owned(),
            Value::Array(_) => "is an array".to_owned(),
        };
        Err((
            "parameters",
            format!(
                "must be a JSON Schema object with \"type\": \"object\" (a call's \
                 arguments are an object); it {what}"
            ),
        ))
    }
}

/// The parameters of a tool declared without any: an object with no properties.
pub(crate) fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// How hard the model should think: `none` turns reasoning off where the provider
/// allows it; `low` / `medium` / `high` ask for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// Reasoning off, where the provider allows it.
    None,
    /// A little reasoning.
    Low,
    /// Some reasoning (the default effort of `reasoning`).
    Medium,
    /// As much reasoning as the provider's effort scale offers.
    High,
}

impl Effort {
    /// The effort of its configuration name (`none`, `low`, `medium`, `high`), or `None`.
    pub fn parse(s: &str) -> Option<Effort> {
        match s {
            "none" => Some(Effort::None),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }
    /// The configuration name of the effort.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::None => "none",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

/// Reasoning control (`reasoning: {effort, budget_tokens?}`), per agent or per turn.
/// `budget_tokens` is the thinking budget where the provider takes one (Anthropic); by
/// default it follows the effort (see `provider::anthropic::thinking_budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    /// How hard the model should think.
    pub effort: Effort,
    /// The thinking budget in tokens, where the provider takes one.
    pub budget_tokens: Option<u32>,
}

impl Reasoning {
    /// Reasoning at this effort, with the budget that follows from it.
    pub fn new(effort: Effort) -> Reasoning {
        Reasoning {
            effort,
            budget_tokens: None,
        }
    }
}

/// How a structured answer is asked for (`output_mode`). `Native` uses the provider's
/// structured-output field; `Tool` forces one call of a tool whose arguments are the
/// answer, for compatible servers that lack the field; `Auto` is `Native`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// `Native` (the default).
    #[default]
    Auto,
    /// The provider's structured-output field.
    Native,
    /// One forced call of a tool whose arguments are the answer.
    Tool,
}

impl OutputMode {
    /// The mode of its configuration name (`auto`, `native`, `tool`), or `None`.
    pub fn parse(s: &str) -> Option<OutputMode> {
        match s {
            "auto" => Some(OutputMode::Auto),
            "native" => Some(OutputMode::Native),
            "tool" => Some(OutputMode::Tool),
            _ => None,
        }
    }

    /// The configuration name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputMode::Auto => "auto",
            OutputMode::Native => "native",
            OutputMode::Tool => "tool",
        }
    }
}

/// How the answer is asked for on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireMode {
    /// The provider's structured-output field.
    Native,
    /// One forced call of a tool named after the schema; its arguments are the answer.
    Tool,
}

/// What a request carries to ask for structured output (the `provider` encodes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputRequest<'a> {
    /// `json_schema.name`, the Responses format's `name`, or the forced tool's name.
    pub name: &'a str,
    /// The schema as this provider takes it (strict for OpenAI, closed objects for
    /// Anthropic, as written for Gemini and for the forced tool).
    pub schema: &'a Value,
    /// The provider's field, or the forced tool.
    pub mode: WireMode,
}

/// Which OpenAI-compatible server the agent talks to, for the request fields only some
/// servers know (reasoning switches, re-sent `reasoning_content`). `Auto` decides from
/// `base_url`: OpenAI's and Azure's hosts, `api.deepseek.com`, port 11434 (Ollama);
/// anything else is `Generic`. Ignored for Anthropic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compat {
    /// Decide from `base_url` (the default).
    Auto,
    /// OpenAI's own API (and Azure's).
    OpenAi,
    /// DeepSeek's API.
    DeepSeek,
    /// Ollama.
    Ollama,
    /// vLLM.
    Vllm,
    /// Any other compatible server: only the common fields.
    Generic,
}

impl Compat {
    /// The server of its configuration name (`auto`, `openai`, `deepseek`, `ollama`,
    /// `vllm`, `generic`), or `None`.
    pub fn parse(s: &str) -> Option<Compat> {
        match s {
            "auto" => Some(Compat::Auto),
            "openai" => Some(Compat::OpenAi),
            "deepseek" => Some(Compat::DeepSeek),
            "ollama" => Some(Compat::Ollama),
            "vllm" => Some(Compat::Vllm),
            "generic" => Some(Compat::Generic),
            _ => None,
        }
    }

    /// The configuration name of the server.
    pub fn as_str(self) -> &'static str {
        match self {
            Compat::Auto => "auto",
            Compat::OpenAi => "openai",
            Compat::DeepSeek => "deepseek",
            Compat::Ollama => "ollama",
            Compat::Vllm => "vllm",
            Compat::Generic => "generic",
        }
    }

    /// `Auto` made concrete for `base_url`.
    pub fn resolve(self, base_url: &str) -> Compat {
        if self != Compat::Auto {
            return self;
        }
        if uses_max_completion_tokens(base_url) {
            return Compat::OpenAi;
        }
        let (host, port) = url_host(base_url);
        if host == "api.deepseek.com" {
            Compat::DeepSeek
        } else if port == Some("11434") {
            Compat::Ollama
        } else {
            Compat::Generic
        }
    }
}

/// The request fields an OpenAI-compatible server takes beyond the common format,
/// decided once when the agent is created ([`Dialect::resolve`]) rather than on every
/// request, and handed to the provider with each one. Anthropic's encoding ignores it.
/// The default is a generic compatible server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// Which server's own fields to use (reasoning switches); never `Auto`.
    pub compat: Compat,
    /// Send the output limit as `max_completion_tokens` (what OpenAI's own API wants; its
    /// reasoning models reject `max_tokens`) instead of `max_tokens` (what compatible
    /// servers know). Follows the host alone, whatever `compat` says.
    pub max_completion_tokens: bool,
}

impl Default for Dialect {
    fn default() -> Self {
        Dialect {
            compat: Compat::Generic,
            max_completion_tokens: false,
        }
    }
}

impl Dialect {
    /// The dialect of the server at `base_url`, with `compat` as configured.
    pub fn resolve(compat: Compat, base_url: &str) -> Dialect {
        Dialect {
            compat: compat.resolve(base_url),
            max_completion_tokens: uses_max_completion_tokens(base_url),
        }
    }

    /// Whether the reasoning of an assistant message goes back as `reasoning_content`
    /// (see `provider::openai::request_body`): to every server but OpenAI's own.
    pub fn resends_reasoning(self) -> bool {
        self.compat != Compat::OpenAi
    }
}

/// Whether an OpenAI base URL is OpenAI's own API (or Azure OpenAI), which take
/// `max_completion_tokens`; compatible servers (vLLM, Ollama, llama.cpp…) keep `max_tokens`.
pub fn uses_max_completion_tokens(base_url: &str) -> bool {
    let (host, _) = url_host(base_url);
    host == "api.openai.com" || host.ends_with(".openai.azure.com")
}

/// The host of `base_url`, lowercased, and its port if one is written: what decides
/// which server's own request fields apply. Ends where a URL parser ends the authority
/// (`/`, `\`, `?`, `#`) and skips any user info, so `https://API.OpenAI.com` is
/// OpenAI's API and `https://api.openai.com@other.test` is not.
pub(crate) fn url_host(base_url: &str) -> (String, Option<&str>) {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, Some(p)),
        _ => (host_port, None),
    };
    (host.to_ascii_lowercase(), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_fields_follow_the_host_whatever_its_spelling() {
        assert!(uses_max_completion_tokens("https://API.OpenAI.com/v1"));
        assert!(uses_max_completion_tokens(
            "https://x.OPENAI.AZURE.COM/openai"
        ));
        assert!(!uses_max_completion_tokens(
            "https://api.openai.com@other.test/v1"
        ));
        assert!(!uses_max_completion_tokens(
            "https://other.test\\@api.openai.com/v1"
        ));
        assert_eq!(url_host("http://user:pw@LOCALHOST:11434/v1").0, "localhost");
        assert_eq!(url_host("http://localhost:11434/v1").1, Some("11434"));
        assert_eq!(
            url_host("http://[::1]:11434/v1"),
            ("[::1]".to_owned(), Some("11434"))
        );
        assert_eq!(url_host("http://[::1]/v1"), ("[::1]".to_owned(), None));
        assert_eq!(
            Compat::Auto.resolve("https://API.DeepSeek.com"),
            Compat::DeepSeek
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:11434/v1"),
            Compat::Ollama
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:8000/v1"),
            Compat::Generic
        );
    }

    #[test]
    fn a_dialect_takes_the_output_limit_field_from_the_host_and_the_rest_from_compat() {
        // An explicit compat does not move the output-limit field, which follows the host.
        let d = Dialect::resolve(Compat::Generic, "https://api.openai.com/v1");
        assert_eq!((d.compat, d.max_completion_tokens), (Compat::Generic, true));
        assert!(d.resends_reasoning());
        let d = Dialect::resolve(Compat::OpenAi, "http://localhost:8000/v1");
        assert_eq!((d.compat, d.max_completion_tokens), (Compat::OpenAi, false));
        assert!(!d.resends_reasoning());
        let d = Dialect::resolve(Compat::Auto, "https://api.openai.com/v1");
        assert_eq!((d.compat, d.max_completion_tokens), (Compat::OpenAi, true));
        let d = Dialect::resolve(Compat::Auto, "http://localhost:11434/v1");
        assert_eq!((d.compat, d.max_completion_tokens), (Compat::Ollama, false));
        assert_eq!(Dialect::default(), Dialect::resolve(Compat::Generic, ""));
    }
}

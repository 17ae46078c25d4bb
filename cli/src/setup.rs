//! Owns turning the options into a ready agent: the configuration, the host-tool
//! declarations (`--tool` + `--tools FILE`) and the `--session` file (opened, locked
//! and loaded; see `session`).
//! Every problem found here is a `config` error (exit code 2).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use panto::{Agent, Config, Error, ProviderKind, ToolSpec};
use serde_json::Value;

use crate::args::{AgentArgs, Provider};
use crate::session::Session;
use crate::shell_tool::ShellTools;

/// What a subcommand needs to run turns.
pub struct Setup {
    pub agent: Agent,
    pub tools: ShellTools,
    pub session: Option<Session>,
}

impl Setup {
    pub fn build(args: &AgentArgs) -> Result<Setup, Error> {
        let provider = provider_kind(args.provider);
        let model = args
            .model
            .clone()
            .unwrap_or_else(|| default_model(provider).to_owned());
        // `Config::new` reads the provider's API key variable.
        let mut config = Config::new(provider, model);
        if let Some(url) = &args.base_url {
            config = config.with_base_url(url.clone());
        }
        if let Some(key) = &args.api_key {
            config = config.with_api_key(key.clone());
        }
        if config.api_key.is_empty() && args.base_url.is_none() {
            // The provider's own endpoint always wants a key; say so now rather than
            // after a round trip that ends in a 401. (Local servers given with
            // --base-url often need none.)
            return Err(Error::config(format!(
                "no API key: set {} or pass --api-key",
                provider.api_key_env()
            )));
        }
        if let Some(system) = &args.system {
            config = config.with_system(system.clone());
        }
        if let Some(n) = args.max_tokens {
            config = config.with_max_tokens(n);
        }
        if let Some(n) = args.max_steps {
            config = config.with_max_steps(n);
        }
        if let Some(n) = args.retries {
            config.retry.max_retries = n;
        }
        if let Some(ms) = args.idle_timeout_ms {
            config.timeouts.idle_ms = ms;
        }
        if let Some(ms) = args.timeout_ms {
            config.timeouts.request_ms = ms;
        }
        if let Some(ms) = args.tool_timeout_ms {
            config = config.with_tool_timeout_ms(ms);
        }
        // The shell tools cap their own reading, which is what keeps a runaway command
        // from filling memory; the core's cap (which also covers what a host submits)
        // leaves room for their truncation note so the model still reads it.
        let max_tool_output = usize::try_from(args.max_tool_output_bytes).unwrap_or(usize::MAX);
        config = config.with_max_tool_output_bytes(max_tool_output.saturating_add(1024));
        let (specs, commands) = host_tools(args)?;
        for spec in specs {
            config = config.with_host_tool(spec);
        }
        // Validates the whole configuration (URL, zero limits, …) as `config` errors.
        let agent = Agent::new(config)?;
        // Locked before loading: what is loaded is what this process will save over.
        let session = args.session.as_deref().map(Session::open).transpose()?;
        if let Some(session) = &session {
            session.load(&agent)?;
        }
        Ok(Setup {
            agent,
            tools: ShellTools::new(commands, max_tool_output),
            session,
        })
    }
}

pub fn provider_kind(provider: Provider) -> ProviderKind {
    match provider {
        Provider::OpenAi => ProviderKind::OpenAi,
        Provider::Anthropic => ProviderKind::Anthropic,
    }
}

fn default_model(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::OpenAi => "gpt-4o-mini",
        ProviderKind::Anthropic => "claude-sonnet-4-5",
    }
}

/// The tool declarations for the model and the command of each tool, in `--tool` order.
fn host_tools(args: &AgentArgs) -> Result<(Vec<ToolSpec>, HashMap<String, String>), Error> {
    let mut described = match &args.tools_file {
        Some(path) => read_tools_file(path)?,
        None => Vec::new(),
    };
    let mut specs = Vec::new();
    let mut commands = HashMap::new();
    for tool in &args.tools {
        if commands
            .insert(tool.name.clone(), tool.command.clone())
            .is_some()
        {
            return Err(Error::config(format!(
                "--tool {}: given more than once",
                tool.name
            )));
        }
        let spec = match described.iter().position(|s| s.name == tool.name) {
            Some(i) => described.remove(i),
            None => ToolSpec {
                name: tool.name.clone(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            },
        };
        specs.push(spec);
    }
    if let Some(orphan) = described.first() {
        return Err(Error::config(format!(
            "--tools: {:?} is described but has no command (add --tool {}=COMMAND)",
            orphan.name, orphan.name
        )));
    }
    Ok((specs, commands))
}

/// Reads `[{"name","description","parameters"}]`, strictly: an unknown key is a typo
/// that would otherwise silently drop a description or a schema.
fn read_tools_file(path: &Path) -> Result<Vec<ToolSpec>, Error> {
    let shown = path.display();
    let text = fs::read_to_string(path)
        .map_err(|e| Error::config(format!("--tools {shown}: cannot read: {e}")))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::config(format!("--tools {shown}: not valid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(Error::config(format!(
            "--tools {shown}: must be a JSON array of tools"
        )));
    };
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |what: &str| Error::config(format!("--tools {shown}: [{i}]{what}"));
        let Value::Object(mut obj) = item else {
            return Err(at(": must be an object"));
        };
        if let Some(key) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "name" | "description" | "parameters"))
        {
            return Err(at(&format!(
                ".{key}: unknown key (known: name, description, parameters)"
            )));
        }
        let name = match obj.remove("name") {
            Some(Value::String(s)) if !s.is_empty() => s,
            _ => return Err(at(".name: must be a non-empty string")),
        };
        let description = match obj.remove("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(_) => return Err(at(".description: must be a string")),
        };
        let parameters = match obj.remove("parameters") {
            None | Some(Value::Null) => serde_json::json!({"type": "object"}),
            Some(v @ Value::Object(_)) => v,
            Some(_) => return Err(at(".parameters: must be a JSON Schema object")),
        };
        if specs.iter().any(|s| s.name == name) {
            return Err(at(&format!(".name: {name:?} is described twice")));
        }
        specs.push(ToolSpec {
            name,
            description,
            parameters,
        });
    }
    Ok(specs)
}

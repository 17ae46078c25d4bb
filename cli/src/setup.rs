//! Owns turning the options into a ready agent: which setting wins (flags, then the
//! profile, then environment variables, then the defaults), where the API key may go,
//! the host-tool declarations (`--tool`, `--tools FILE`, a profile's tools) and the
//! conversation file (`--session`, `--continue`, or a new one; see `session`).
//! Every problem found here is a `config` error (exit code 2).
//!
//! The key rule: a key found in `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` is sent to the
//! provider's own API, or to the base URL of `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL`
//! (set beside it, as the providers' SDKs read them). Any other base URL gets a key only
//! when the user tied one to this run: `--api-key`, `--api-key-env VAR`, or the
//! profile's `api_key`, `api_key_env` or `api_key_cmd` — a profile's key only with the
//! profile's own base URL (or the provider's API, for a profile without one). So
//! `--base-url http://…` typed to try a server never receives the OpenAI key by
//! accident, not even from the default profile.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use panto::{Agent, CompactionConfig, Config, Effort, Error, ProviderKind, Reasoning, ToolSpec};
use serde_json::Value;

use crate::args::{AgentArgs, Provider};
use crate::paths;
use crate::profile::{self, Chosen};
use crate::session::Session;
use crate::shell_tool::ShellTools;

/// Conversations kept in the state directory; older ones are removed.
const KEPT_CONVERSATIONS: usize = 100;

/// What a subcommand needs to run turns.
pub struct Setup {
    pub agent: Agent,
    pub tools: ShellTools,
    pub session: Option<Session>,
    pub target: Target,
    /// The key sent, for redaction (empty when none).
    pub key: String,
    /// Ask on the terminal before each tool call (`--confirm` with a terminal; without
    /// one the tools are declared as needing approval instead, and the turn pauses).
    pub confirm: bool,
}

/// Where requests go and with which key: what error hints are made of.
#[derive(Debug, Clone)]
pub struct Target {
    pub provider: ProviderKind,
    pub base_url: String,
    pub key: KeySource,
    pub profile: Option<String>,
}

impl Target {
    pub fn endpoint(&self) -> String {
        format!(
            "{}{}",
            self.base_url.trim_end_matches('/'),
            self.provider.endpoint_path()
        )
    }

    /// The base URL names this machine (where "is the server running?" is the question).
    pub fn is_loopback(&self) -> bool {
        let host = host_of(&self.base_url);
        host == "localhost" || host.starts_with("127.") || host == "[::1]"
    }
}

/// Where the API key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Flag,
    FlagEnv(String),
    Profile,
    /// The provider's variable, sent to the provider's API or its `*_BASE_URL`.
    ProviderEnv(&'static str),
    /// The provider's variable is set, but this base URL was not tied to it.
    Withheld(&'static str),
    /// The profile (named) has a key, but `--base-url` points elsewhere than its URL.
    WithheldProfile(String),
    None,
}

/// Where the base URL came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UrlSource {
    Flag,
    Profile,
    Env,
    Default,
}

/// `chat`'s default for `--compact-at`: far enough into the context windows of current
/// models (128k and more) that a summary costs less than what it saves.
pub const CHAT_COMPACT_AT: u64 = 100_000;

impl Setup {
    pub fn build(args: &AgentArgs) -> Result<Setup, Error> {
        let chosen = profile::choose(args.config.as_deref(), args.profile.as_deref())?;
        let prof = chosen.as_ref().map(|c| &c.profile);
        let provider = provider_kind(
            args.provider
                .or(prof.and_then(|p| p.provider))
                .unwrap_or(Provider::OpenAi),
        );
        let model = args
            .model
            .clone()
            .or_else(|| prof.and_then(|p| p.model.clone()))
            .or_else(|| non_empty_env("PANTO_MODEL"))
            .unwrap_or_else(|| default_model(provider).to_owned());
        let base_url_env = base_url_env(provider);
        let (base_url, url_source) = if let Some(url) = &args.base_url {
            (url.clone(), UrlSource::Flag)
        } else if let Some(url) = prof.and_then(|p| p.base_url.clone()) {
            (url, UrlSource::Profile)
        } else if let Some(url) = non_empty_env(base_url_env) {
            (url, UrlSource::Env)
        } else {
            (provider.default_base_url().to_owned(), UrlSource::Default)
        };
        let (key, key_source) = api_key(args, chosen.as_ref(), provider, &base_url, url_source)?;
        if key.is_empty() && url_source == UrlSource::Default {
            // The provider's own endpoint always wants a key; say so now rather than
            // after a round trip that ends in a 401. (Local servers often need none.)
            return Err(Error::config(format!(
                "no API key: set {} or pass --api-key-env VAR",
                provider.api_key_env()
            )));
        }
        let mut config = Config::new(provider, model);
        config.base_url = base_url.clone();
        // Always replaced: `Config::new` read the provider's variable, which must not
        // reach a base URL it was not tied to.
        config.api_key = key.clone();
        if let Some(system) = args
            .system
            .clone()
            .or_else(|| prof.and_then(|p| p.system.clone()))
        {
            config = config.with_system(system);
        }
        if let Some(t) = args.temperature.or(prof.and_then(|p| p.temperature)) {
            config = config.with_temperature(t);
        }
        if let Some(n) = args.max_tokens.or(prof.and_then(|p| p.max_tokens)) {
            config = config.with_max_tokens(n);
        }
        if let Some(n) = args.max_steps.or(prof.and_then(|p| p.max_steps)) {
            config = config.with_max_steps(n);
        }
        if let Some(n) = args.max_tool_calls {
            config = config.with_max_tool_calls(n);
        }
        for (kind, model) in &args.fallback {
            let entry = fallback_entry(*kind, model, &config);
            config = config.with_fallback(entry);
        }
        let effort = args
            .reasoning
            .clone()
            .or_else(|| prof.and_then(|p| p.reasoning.clone()));
        let budget = args
            .reasoning_budget
            .or(prof.and_then(|p| p.reasoning_budget));
        if effort.is_some() || budget.is_some() {
            let effort = match effort.as_deref() {
                None => Effort::Medium,
                Some(word) => Effort::parse(word).ok_or_else(|| {
                    Error::config(format!(
                        "reasoning: must be none, low, medium or high (got {word:?})"
                    ))
                })?,
            };
            config = config.with_reasoning(Reasoning {
                effort,
                budget_tokens: budget,
            });
        }
        if let Some(word) = args
            .compat
            .clone()
            .or_else(|| prof.and_then(|p| p.compat.clone()))
        {
            let compat = panto::Compat::parse(&word).ok_or_else(|| {
                Error::config(format!(
                    "compat: must be auto, openai, deepseek, ollama, vllm or generic (got {word:?})"
                ))
            })?;
            config = config.with_compat(compat);
        }
        if args.store || prof.and_then(|p| p.store).unwrap_or(false) {
            config = config.with_store(true);
        }
        let compact_default = args.interactive_chat.then_some(CHAT_COMPACT_AT);
        match args
            .compact_at
            .or(prof.and_then(|p| p.compact_at))
            .or(compact_default)
        {
            None | Some(0) => {}
            Some(threshold_tokens) => {
                config = config.with_compaction(CompactionConfig {
                    threshold_tokens,
                    keep_last: args
                        .compact_keep
                        .or(prof.and_then(|p| p.compact_keep))
                        .and_then(|n| usize::try_from(n).ok())
                        .unwrap_or(panto::config::DEFAULT_KEEP_LAST),
                    model: None,
                    prompt: None,
                });
            }
        }
        if let Some(p) = prof {
            // A profile's credential headers (Azure's `api-key`, `x-auth-token`, …) follow
            // the rule of its key: a `--base-url` elsewhere does not get them.
            let credentials_may_go = profile_key_may_go(p, provider, &base_url, url_source);
            for (name, value) in &p.headers {
                if !credentials_may_go && panto::secret::is_secret_header(name) {
                    eprintln!(
                        "panto: not sending profile header {name} to {base_url} (the profile's \
                         credentials go only to its own base URL)"
                    );
                    continue;
                }
                let value = profile::expand_vars(value, &format!("profile header {name}"))?;
                config = config.with_header(name.clone(), value);
            }
        }
        for (name, value) in &args.headers {
            config = config.with_header(name.clone(), value.clone());
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
        for (name, server) in crate::mcp::servers(prof, &args.mcp)? {
            config = config.with_mcp_server(name, server);
        }
        let (specs, commands) = host_tools(args, chosen.as_ref())?;
        // --confirm with nobody to ask: every call of these tools pauses the turn for
        // an approval given later (`panto resume --approve`), instead of being refused.
        let ask = args.confirm && crate::confirm::terminal_available();
        for mut spec in specs {
            spec.needs_approval = args.confirm && !ask;
            config = config.with_host_tool(spec);
        }
        // Validates the whole configuration (URL, zero limits, …) as `config` errors.
        let agent = Agent::new(config)?;
        if let Some(set) = agent.mcp_servers() {
            crate::mcp::lend_oauth(set);
            crate::mcp_ask::lend(set);
        }
        // Locked before loading: what is loaded is what this process will save over.
        let session = open_session(args)?;
        if let Some(session) = &session {
            session.load(&agent)?;
        }
        Ok(Setup {
            agent,
            tools: ShellTools::new(commands, max_tool_output),
            session,
            target: Target {
                provider,
                base_url,
                key: key_source,
                profile: chosen.map(|c| c.name),
            },
            key,
            confirm: ask,
        })
    }

    /// Saves the conversation, if it has a file, and makes it the one `--continue`
    /// resumes.
    pub fn save(&self) -> Result<(), Error> {
        let Some(session) = &self.session else {
            return Ok(());
        };
        session.save(&self.agent)?;
        remember_last(session.path());
        Ok(())
    }

    /// Replaces the model for the next turns, keeping the conversation.
    pub fn switch_model(&mut self, model: &str) -> Result<(), Error> {
        let mut config = self.agent.config().clone();
        config.model = model.to_owned();
        let agent = Agent::new(config)?;
        if let Some(set) = agent.mcp_servers() {
            crate::mcp::lend_oauth(set);
            crate::mcp_ask::lend(set);
        }
        agent.set_history(self.agent.history())?;
        self.agent = agent;
        Ok(())
    }
}

fn non_empty_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// A `--fallback PROVIDER:MODEL` entry: of the run's provider, its base URL and key (the
/// same endpoint, another model); of another provider, its `*_BASE_URL` (else its API)
/// and its key variable, read when the agent is made.
fn fallback_entry(kind: ProviderKind, model: &str, config: &Config) -> panto::FallbackModel {
    let entry = panto::FallbackModel::new(kind, model);
    if kind == config.provider {
        return entry
            .with_base_url(config.base_url.clone())
            .with_api_key(config.api_key.clone());
    }
    match non_empty_env(base_url_env(kind)) {
        Some(url) => entry.with_base_url(url),
        None => entry,
    }
}

fn base_url_env(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => "ANTHROPIC_BASE_URL",
        ProviderKind::Gemini => "GEMINI_BASE_URL",
        _ => "OPENAI_BASE_URL",
    }
}

/// The key for this run and where it came from (see the module documentation).
fn api_key(
    args: &AgentArgs,
    chosen: Option<&Chosen>,
    provider: ProviderKind,
    base_url: &str,
    url_source: UrlSource,
) -> Result<(String, KeySource), Error> {
    if let Some(key) = &args.api_key {
        return Ok((key.clone(), KeySource::Flag));
    }
    if let Some(var) = &args.api_key_env {
        return match non_empty_env(var) {
            Some(key) => Ok((key, KeySource::FlagEnv(var.clone()))),
            None => Err(Error::config(format!(
                "--api-key-env {var}: {var} is not set"
            ))),
        };
    }
    if let Some(chosen) = chosen {
        let p = &chosen.profile;
        let name = &chosen.name;
        let has_key = p.api_key.is_some() || p.api_key_env.is_some() || p.api_key_cmd.is_some();
        if has_key && !profile_key_may_go(p, provider, base_url, url_source) {
            return Ok((String::new(), KeySource::WithheldProfile(name.clone())));
        }
        if let Some(key) = &p.api_key {
            return Ok((key.clone(), KeySource::Profile));
        }
        if let Some(var) = &p.api_key_env {
            return match non_empty_env(var) {
                Some(key) => Ok((key, KeySource::Profile)),
                None => Err(Error::config(format!(
                    "profile {name}: api_key_env {var}: {var} is not set"
                ))),
            };
        }
        if let Some(command) = &p.api_key_cmd {
            return key_from_command(command, name).map(|key| (key, KeySource::Profile));
        }
    }
    let var = provider.api_key_env();
    let Some(key) = non_empty_env(var) else {
        return Ok((String::new(), KeySource::None));
    };
    if url_source == UrlSource::Env || is_providers_own(provider, base_url) {
        Ok((key, KeySource::ProviderEnv(var)))
    } else {
        Ok((String::new(), KeySource::Withheld(var)))
    }
}

/// A profile's key belongs with the profile's base URL, or, in a profile without one,
/// with the provider's own API: a `--base-url` elsewhere (a server being tried, maybe
/// with the profile chosen only as the default) does not get it.
fn profile_key_may_go(
    profile: &profile::Profile,
    provider: ProviderKind,
    base_url: &str,
    url_source: UrlSource,
) -> bool {
    if url_source != UrlSource::Flag {
        return true;
    }
    match &profile.base_url {
        Some(own) => same_url(own, base_url),
        None => is_providers_own(provider, base_url),
    }
}

/// The same base URL, up to case of scheme and host, surrounding blanks and trailing
/// slashes.
fn same_url(a: &str, b: &str) -> bool {
    let normal = |u: &str| {
        let u = u.trim().trim_end_matches('/');
        match u.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) =
                    rest.split_at(rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len()));
                format!(
                    "{}://{}{path}",
                    scheme.to_ascii_lowercase(),
                    authority.to_ascii_lowercase()
                )
            }
            None => u.to_owned(),
        }
    };
    normal(a) == normal(b)
}

fn key_from_command(command: &str, profile: &str) -> Result<String, Error> {
    let what = format!("profile {profile}: api_key_cmd");
    let output = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::config(format!("{what}: cannot run: {e}")))?;
    if !output.status.success() {
        // The command's own words went to stderr; its stdout might be a key.
        return Err(Error::config(format!("{what}: failed ({})", output.status)));
    }
    let key = String::from_utf8(output.stdout)
        .map_err(|_| Error::config(format!("{what}: printed something that is not UTF-8")))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(Error::config(format!("{what}: printed nothing")));
    }
    Ok(key.to_owned())
}

/// Whether `base_url` is the provider's own API (over https).
fn is_providers_own(provider: ProviderKind, base_url: &str) -> bool {
    let Some(default_host) = provider
        .default_base_url()
        .strip_prefix("https://")
        .map(|rest| rest.split('/').next().unwrap_or(rest))
    else {
        return false;
    };
    base_url.trim().to_ascii_lowercase().starts_with("https://")
        && host_of(base_url) == default_host
}

/// The host of a URL, lowercased, without user info or port (`[::1]` keeps brackets).
/// A backslash ends the authority as `/` does: the HTTP client's URL parser reads it so
/// in http(s) URLs, and the host that decides where the key may go must be the host the
/// request goes to.
fn host_of(url: &str) -> String {
    let rest = url.trim().split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        host_port
            .split_once(']')
            .map_or(host_port.to_owned(), |(h, _)| format!("{h}]"))
    } else {
        host_port.split(':').next().unwrap_or("").to_owned()
    };
    host.to_ascii_lowercase()
}

pub fn provider_kind(provider: Provider) -> ProviderKind {
    match provider {
        Provider::OpenAi => ProviderKind::OpenAi,
        Provider::Anthropic => ProviderKind::Anthropic,
        Provider::Gemini => ProviderKind::Gemini,
        Provider::OpenAiResponses => ProviderKind::OpenAiResponses,
    }
}

fn default_model(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => "claude-sonnet-4-5",
        ProviderKind::Gemini => "gemini-2.5-flash",
        _ => "gpt-4o-mini",
    }
}

/// The conversation file: `--session`, the last one for `--continue`, else a new one
/// in the state directory (without one if that cannot be made: a read-only home must
/// not stop a question from being asked).
fn open_session(args: &AgentArgs) -> Result<Option<Session>, Error> {
    if let Some(path) = &args.session {
        return Session::open(path).map(Some);
    }
    if args.continue_last {
        let pointer = paths::last_conversation_file();
        let path = fs::read_to_string(&pointer)
            .ok()
            .map(|s| PathBuf::from(s.trim_end_matches('\n')))
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| {
                Error::config("--continue: there is no earlier conversation to continue")
            })?;
        // The pointer is written with an absolute path to an existing file; anything
        // else (a pruned conversation, a damaged pointer) would silently start an empty
        // conversation under that name while the user expects the old one.
        let unfinished = crate::checkpoint::conversation_path(&path).is_file();
        if !path.is_absolute() || !(path.is_file() || unfinished) {
            return Err(Error::config(format!(
                "--continue: the last conversation ({}) no longer exists; start a new one without -c",
                path.display()
            )));
        }
        return Session::open(&path).map(Some);
    }
    let dir = paths::conversations_dir();
    if paths::create_private_dir(&dir).is_err() {
        return Ok(None);
    }
    prune_conversations(&dir);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let name = format!("{stamp:015}-{}.json", std::process::id());
    Ok(Session::open(&dir.join(name)).ok())
}

/// Keeps the newest [`KEPT_CONVERSATIONS`] conversations (names sort by time).
fn prune_conversations(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    if names.len() < KEPT_CONVERSATIONS {
        return;
    }
    names.sort();
    for name in &names[..names.len() + 1 - KEPT_CONVERSATIONS] {
        let _ = fs::remove_file(dir.join(name));
        let _ = fs::remove_file(dir.join(format!("{name}.lock")));
        let _ = fs::remove_file(dir.join(format!("{name}.checkpoint")));
    }
}

/// Best effort: failing to remember only costs a later `--continue`. A conversation
/// not saved yet (its turn is running) is remembered by its directory's real path.
pub(crate) fn remember_last(path: &Path) {
    let absolute = match path.canonicalize() {
        Ok(p) => p,
        Err(_) => match (path.parent().map(Path::canonicalize), path.file_name()) {
            (Some(Ok(dir)), Some(name)) => dir.join(name),
            _ => return,
        },
    };
    let pointer = paths::last_conversation_file();
    if let Some(dir) = pointer.parent() {
        if paths::create_private_dir(dir).is_err() {
            return;
        }
    }
    let tmp = pointer.with_extension(format!("{}.tmp", std::process::id()));
    let text = format!("{}\n", absolute.display());
    if fs::write(&tmp, text).is_ok() && fs::rename(&tmp, &pointer).is_err() {
        let _ = fs::remove_file(&tmp);
    }
}

/// The tool declarations for the model and the command of each tool: the profile's
/// tools, then the `--tool` ones; `--tools FILE` entries describe them or bring their
/// own command.
fn host_tools(
    args: &AgentArgs,
    chosen: Option<&Chosen>,
) -> Result<(Vec<ToolSpec>, HashMap<String, String>), Error> {
    let mut described = Vec::new();
    let mut declared: Vec<(String, String)> = Vec::new();
    if let Some(chosen) = chosen {
        if let Some(file) = &chosen.profile.tools_file {
            let path = chosen.dir.join(file);
            for (spec, command) in read_tools_file(&path, "profile tools_file")? {
                if let Some(command) = command {
                    declared.push((spec.name.clone(), command));
                }
                described.push(spec);
            }
        }
        for tool in &chosen.profile.tools {
            declared.push((tool.name.clone(), tool.command.clone()));
            described.push(ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool
                    .parameters
                    .clone()
                    .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                needs_approval: false,
                external: false,
            });
        }
    }
    if let Some(path) = &args.tools_file {
        for (spec, command) in read_tools_file(path, "--tools")? {
            // A later description of the same name replaces the profile's.
            described.retain(|s| s.name != spec.name);
            if let Some(command) = command {
                declared.retain(|(n, _)| *n != spec.name);
                declared.push((spec.name.clone(), command));
            }
            described.push(spec);
        }
    }
    let mut specs = Vec::new();
    let mut commands = HashMap::new();
    let mut from_flags = std::collections::HashSet::new();
    for tool in &args.tools {
        if !from_flags.insert(tool.name.clone()) {
            return Err(Error::config(format!(
                "--tool {}: given more than once",
                tool.name
            )));
        }
        // The command line wins over the profile and the file.
        declared.retain(|(n, _)| *n != tool.name);
        declared.push((tool.name.clone(), tool.command.clone()));
    }
    for (name, command) in declared {
        let spec = match described.iter().position(|s| s.name == name) {
            Some(i) => described.remove(i),
            None => ToolSpec {
                name: name.clone(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
                needs_approval: false,
                external: false,
            },
        };
        specs.push(spec);
        commands.insert(name, command);
    }
    if let Some(orphan) = described.first() {
        return Err(Error::config(format!(
            "--tools: {:?} is described but has no command (add --tool {}=COMMAND, or a \"command\" in its entry)",
            orphan.name, orphan.name
        )));
    }
    Ok((specs, commands))
}

/// The largest tools file read (`--tools`, a profile's `tools_file`; docs/cli.md).
pub const MAX_TOOLS_FILE_BYTES: usize = 4 << 20;

/// Reads `[{"name","description","parameters","command"}]`, strictly: an unknown key is
/// a typo that would otherwise silently drop a description or a schema.
fn read_tools_file(path: &Path, what: &str) -> Result<Vec<(ToolSpec, Option<String>)>, Error> {
    let shown = path.display();
    let bytes = panto::media::read_file(path, MAX_TOOLS_FILE_BYTES, what, "the tools file cap")?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::config(format!("{what} {shown}: not valid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(Error::config(format!(
            "{what} {shown}: must be a JSON array of tools"
        )));
    };
    let mut tools: Vec<(ToolSpec, Option<String>)> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |problem: &str| Error::config(format!("{what} {shown}: [{i}]{problem}"));
        let Value::Object(mut obj) = item else {
            return Err(at(": must be an object"));
        };
        if let Some(key) = obj.keys().find(|k| {
            !matches!(
                k.as_str(),
                "name" | "description" | "parameters" | "command"
            )
        }) {
            return Err(at(&format!(
                ".{key}: unknown key (known: name, description, parameters, command)"
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
        let command = match obj.remove("command") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
            Some(_) => return Err(at(".command: must be a non-empty string")),
        };
        if tools.iter().any(|(s, _)| s.name == name) {
            return Err(at(&format!(".name: {name:?} is described twice")));
        }
        tools.push((
            ToolSpec {
                name,
                description,
                parameters,
                needs_approval: false,
                external: false,
            },
            command,
        ));
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/cli.md's example tools file is one panto reads.
    #[test]
    fn the_readme_tools_file_parses() {
        let readme = include_str!("../../docs/cli.md");
        let start = readme.find("```json\n[").expect("a tools block") + "```json\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let path =
            std::env::temp_dir().join(format!("panto-readme-tools-{}.json", std::process::id()));
        fs::write(&path, &readme[start..end]).expect("write");
        let tools = read_tools_file(&path, "--tools").expect("parses");
        let _ = fs::remove_file(&path);
        assert_eq!(tools.len(), 2);
        assert!(tools[0].1.is_some(), "the first carries its command");
    }

    #[test]
    fn hosts_are_found_in_any_url_shape() {
        assert_eq!(host_of("https://api.openai.com/v1"), "api.openai.com");
        assert_eq!(host_of("http://u:p@LOCALHOST:11434/v1"), "localhost");
        assert_eq!(host_of("http://[::1]:8080/v1"), "[::1]");
        assert_eq!(host_of("http://127.0.0.1:8080"), "127.0.0.1");
    }

    #[test]
    fn only_the_providers_own_https_api_is_its_own() {
        assert!(is_providers_own(
            ProviderKind::OpenAi,
            "https://api.openai.com/v1/"
        ));
        assert!(is_providers_own(
            ProviderKind::Anthropic,
            "https://api.anthropic.com"
        ));
        assert!(!is_providers_own(
            ProviderKind::OpenAi,
            "http://api.openai.com/v1"
        ));
        assert!(!is_providers_own(
            ProviderKind::OpenAi,
            "https://api.openai.com.evil.test/v1"
        ));
        assert!(!is_providers_own(
            ProviderKind::OpenAi,
            "https://evil.test/api.openai.com"
        ));
        assert!(!is_providers_own(
            ProviderKind::OpenAi,
            "https://api.anthropic.com"
        ));
    }

    /// URL parsers (reqwest's among them) read a backslash in an http(s) URL as a path
    /// separator: the host of `https://evil.test\@api.openai.com/v1` is `evil.test`.
    #[test]
    fn a_backslash_ends_the_host_as_it_does_for_the_http_client() {
        assert_eq!(
            host_of("https://evil.test\\@api.openai.com/v1"),
            "evil.test"
        );
        assert!(!is_providers_own(
            ProviderKind::OpenAi,
            "https://evil.test\\@api.openai.com/v1"
        ));
        assert!(!is_providers_own(
            ProviderKind::Anthropic,
            "https://evil.test\\@api.anthropic.com"
        ));
    }
}

//! Owns the command line: subcommands, options and their help text (clap derive), and
//! the one liberty taken with it: a command line without a subcommand is a `run`
//! (`panto "hello"`). It only parses; turning options into an agent is `setup`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::ErrorKind as ClapErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use crate::exit::EXIT_CODES_HELP;

/// What `panto --help` opens with.
pub const EXAMPLES: &str = "\
Examples:
  panto \"Summarize the SSE spec in one sentence\"        # one turn (same as panto run …)
  cat notes.md | panto run summarize this please        # stdin first, then the prompt
  git diff | panto -q \"write a commit message\" > msg    # stdout carries only the answer
  panto chat -p ollama                                  # a conversation, with a profile
  panto -c \"and in French?\"                             # continue the last conversation
  panto --tool weather='curl -s \"wttr.in/$(jq -r .city)?format=3\"' \"Weather in Paris?\"
  panto run --json \"Hi\" | jq -c .                       # one JSON event per line";

#[derive(Debug, Parser)]
#[command(
    name = "panto",
    version,
    about = "An LLM agent on the command line: streams a turn, runs your shell tools, repeats until the model is done.",
    before_help = EXAMPLES,
    after_help = EXIT_CODES_HELP,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start the MCP servers of the profile and the --mcp flags, and print each one's
    /// tools (as the model sees their names), or why it could not start.
    List(McpListArgs),
    /// List the resources (and resource templates) of each server, or of --server.
    Resources(McpResourcesArgs),
    /// Read a resource by its URI: text to stdout as it is; binary contents to stdout
    /// when it is not a terminal (redirect it to a file), else a line naming them.
    Read(McpReadArgs),
    /// List the prompts of each server, or of --server, with their arguments.
    Prompts(McpResourcesArgs),
    /// Fill in a prompt with its arguments (NAME=VALUE) and print its messages.
    Prompt(McpPromptArgs),
}

#[derive(Debug, Args)]
pub struct McpResourcesArgs {
    #[command(flatten)]
    pub servers: McpListArgs,
    /// Only this server [default: every server].
    #[arg(short = 's', long, value_name = "NAME")]
    pub server: Option<String>,
    /// One JSON object per line (each with its "server"; a server's failure as
    /// {"server","error"}).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct McpReadArgs {
    #[command(flatten)]
    pub servers: McpListArgs,
    /// The server [default: the only one, else the one that lists the URI].
    #[arg(short = 's', long, value_name = "NAME")]
    pub server: Option<String>,
    /// The contents as one JSON object: {"contents":[{"uri","mime_type"?,"text"|"blob",
    /// "part"}]} (blob in base64).
    #[arg(long)]
    pub json: bool,
    /// The resource's URI.
    #[arg(value_name = "URI")]
    pub uri: String,
}

#[derive(Debug, Args)]
pub struct McpPromptArgs {
    #[command(flatten)]
    pub servers: McpListArgs,
    /// The server [default: the only one, else the one that lists the prompt].
    #[arg(short = 's', long, value_name = "NAME")]
    pub server: Option<String>,
    /// The messages as one JSON object: {"description"?,"messages":[{"role","content"}]}.
    #[arg(long)]
    pub json: bool,
    /// The prompt's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Its arguments.
    #[arg(value_name = "ARG=VALUE", value_parser = parse_prompt_argument)]
    pub arguments: Vec<(String, String)>,
}

/// One `NAME=VALUE` argument of `panto mcp prompt`.
fn parse_prompt_argument(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?}: a prompt's argument is NAME=VALUE")),
    }
}

#[derive(Debug, Args)]
pub struct McpListArgs {
    /// A profile of the config file [default: $PANTO_PROFILE, else the file's
    /// default_profile].
    #[arg(short = 'p', long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The config file [default: $PANTO_CONFIG, else $XDG_CONFIG_HOME/panto/config.toml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// An MCP server, as for `run`. Repeatable.
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL", value_parser = parse_mcp)]
    pub mcp: Vec<(String, panto::McpServer)>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one turn: send the prompt (and piped stdin), stream the answer, run tools,
    /// exit. The default command: `panto "hello"` is `panto run "hello"`.
    #[command(before_help = EXAMPLES, after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Continue a turn from its checkpoint file (`run --checkpoint FILE`, or the file a
    /// paused turn names): answer the calls it paused for with --approve, --reject and
    /// --result, and give the same tool flags as the run. The file keeps the turn's
    /// latest checkpoint as it goes on. A response the file holds is not requested
    /// again; a tool call without a result in it runs again.
    #[command(after_help = EXIT_CODES_HELP)]
    Resume(ResumeArgs),
    /// An interactive conversation: line editing, history, /help for commands.
    #[command(after_help = EXIT_CODES_HELP)]
    Chat(AgentArgs),
    /// MCP servers: `panto mcp list [-p PROFILE]`; their resources (`mcp resources`,
    /// `mcp read URI`) and prompts (`mcp prompts`, `mcp prompt NAME [ARG=VALUE…]`).
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Print how many tokens the next request would be: the conversation (with
    /// --session or -c), the tools, the system prompt and PROMPT. The provider counts
    /// where it has a count endpoint (Anthropic, Gemini, OpenAI Responses); otherwise
    /// the number is an estimate, followed by "(estimated)". With --json:
    /// {"tokens": N, "estimated": BOOL}. Nothing is sent to the model.
    #[command(after_help = EXIT_CODES_HELP)]
    Tokens(TokensArgs),
    /// Print a shell completion script: `panto completions bash > ~/.local/share/bash-completion/completions/panto`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The prompt; several words are joined with spaces. `-` reads the prompt from
    /// stdin. Piped stdin with a prompt is sent first, then the prompt.
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
    /// Attach a file to the prompt: an image (PNG, JPEG, GIF, WebP) or a PDF, told by its
    /// bytes. Repeat for several; they follow the prompt's text in order. Binary data
    /// piped on stdin of one of these types is attached the same way.
    #[arg(short = 'a', long = "attach", value_name = "FILE")]
    pub attach: Vec<std::path::PathBuf>,
    /// Structured output: the answer must be JSON matching this JSON Schema file (an
    /// object schema). stdout gets the validated JSON on one line; an answer that does
    /// not match after a repair, a refusal or an answer cut at max_tokens exits with
    /// code 7 naming the error kind.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<std::path::PathBuf>,
    /// Keep the turn's latest checkpoint in FILE: replaced atomically (mode 0600) after
    /// each model response and each tool result, so that `panto resume FILE` continues
    /// the turn if this process dies or the turn pauses.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct TokensArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The prompt; several words are joined with spaces. `-` (or none) reads it from
    /// stdin.
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The checkpoint file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Approve the paused call CALL_ID: it runs. Repeatable.
    #[arg(long, value_name = "CALL_ID")]
    pub approve: Vec<String>,
    /// Reject the paused call CALL_ID: the model reads an error result giving REASON.
    /// Repeatable.
    #[arg(long, value_name = "CALL_ID=REASON", value_parser = parse_answer)]
    pub reject: Vec<(String, String)>,
    /// The result of the paused call CALL_ID, made outside panto. Repeatable.
    #[arg(long, value_name = "CALL_ID=TEXT", value_parser = parse_answer)]
    pub result: Vec<(String, String)>,
}

/// One `CALL_ID=TEXT`.
fn parse_answer(s: &str) -> Result<(String, String), String> {
    let (id, text) = s.split_once('=').ok_or("expected CALL_ID=TEXT")?;
    if id.is_empty() {
        return Err("the CALL_ID is empty (expected CALL_ID=TEXT)".to_owned());
    }
    Ok((id.to_owned(), text.to_owned()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
pub enum Provider {
    /// OpenAI Chat Completions and compatible servers (Ollama, vLLM, Groq, …).
    #[value(name = "openai")]
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Google Gemini, its own API (streamGenerateContent).
    #[serde(rename = "gemini")]
    Gemini,
    /// OpenAI Responses (`/v1/responses`): OpenAI's reasoning models, vLLM, Ollama.
    #[value(name = "openai-responses")]
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

/// Options shared by `run` and `chat`. Settings a profile can give are `Option`s here:
/// absent means "the profile's, else the environment's, else the default" (`setup`).
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// A profile of the config file [default: $PANTO_PROFILE, else the file's
    /// default_profile].
    #[arg(short = 'p', long, value_name = "NAME")]
    pub profile: Option<String>,

    /// The config file [default: $PANTO_CONFIG, else $XDG_CONFIG_HOME/panto/config.toml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Provider wire format [default: openai].
    #[arg(long, value_enum)]
    pub provider: Option<Provider>,

    /// Model name [default: $PANTO_MODEL, else gpt-4o-mini (openai),
    /// claude-sonnet-4-5 (anthropic) or gemini-2.5-flash (gemini)].
    #[arg(short = 'm', long)]
    pub model: Option<String>,

    /// Base URL as in the provider's SDK: OpenAI's includes /v1
    /// (http://localhost:11434/v1 for Ollama), Anthropic's and Gemini's do not [default:
    /// $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL / $GEMINI_BASE_URL, else the provider's
    /// API]. A URL given here gets no key from $OPENAI_API_KEY / $ANTHROPIC_API_KEY /
    /// $GEMINI_API_KEY: pass --api-key-env.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,

    /// API key, sent to whatever base URL is used. Prefer --api-key-env: command lines
    /// are visible to other users of the machine.
    #[arg(long, value_name = "KEY", conflicts_with = "api_key_env")]
    pub api_key: Option<String>,

    /// Take the API key from the variable VAR and send it to whatever base URL is used.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,

    /// System prompt.
    #[arg(short = 's', long, value_name = "TEXT")]
    pub system: Option<String>,

    /// Sampling temperature.
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,

    /// How hard the model thinks: none, low, medium or high. Sent as OpenAI's
    /// `reasoning_effort`, Anthropic's `thinking` budget (1024 / 4096 / 16384 tokens, or
    /// --reasoning-budget) and the switches of DeepSeek, Ollama and vLLM.
    #[arg(long, value_name = "LEVEL", value_parser = ["none", "low", "medium", "high"])]
    pub reasoning: Option<String>,

    /// Thinking budget in tokens, where the provider takes one (Anthropic, Gemini); implies
    /// --reasoning medium when --reasoning is not given.
    #[arg(long, value_name = "TOKENS")]
    pub reasoning_budget: Option<u32>,

    /// Which OpenAI-compatible server this is, for the fields only some servers know
    /// [default: auto, from the base URL]. With --provider openai-responses, vllm and
    /// ollama leave out the request for encrypted reasoning, which they do not have.
    #[arg(long, value_name = "SERVER",
          value_parser = ["auto", "openai", "deepseek", "ollama", "vllm", "generic"])]
    pub compat: Option<String>,

    /// --provider openai-responses: let the server keep each response and send only
    /// what follows it (previous_response_id), instead of the whole conversation.
    #[arg(long)]
    pub store: bool,

    /// Compact the conversation automatically once a request's input passes TOKENS:
    /// older messages are summarized by the model, the last few (--compact-keep) are
    /// kept verbatim, and a note says so. 0 turns it off [default: 100000 in `chat`, off in `run`].
    #[arg(long, value_name = "TOKENS")]
    pub compact_at: Option<u64>,

    /// Messages automatic compaction keeps verbatim at the end [default: 6].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub compact_keep: Option<u64>,

    /// An extra HTTP header for every request, as NAME:VALUE. Repeatable.
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,

    /// Cap on output tokens per response.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,

    /// Cap on assistant messages (model calls) per turn [default: 16].
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u32>,

    /// Cap on the tool calls of one turn: past it the turn fails (exit code for a tool
    /// error) and none of that step's calls runs [default: no cap].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tool_calls: Option<u32>,

    /// A model to send a step to when the request fails after its retries (rate limit,
    /// server error, connection, timeout, overload) before any of its answer was shown,
    /// as PROVIDER:MODEL. Of the run's provider: its base URL and key; of another: that
    /// provider's *_BASE_URL (or its API) and its key variable. Repeatable, tried in
    /// order (at most 8).
    #[arg(long = "fallback", value_name = "PROVIDER:MODEL", value_parser = parse_fallback)]
    pub fallback: Vec<(panto::ProviderKind, String)>,

    /// Retries of a request that fails before its first byte [default: 2].
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,

    /// Longest wait for stream progress, in milliseconds [default: 120000].
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,

    /// Longest time for one request, from send to last byte, in milliseconds
    /// [default: 600000].
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,

    /// A tool backed by a shell command, run with `sh -c COMMAND`: the call's arguments
    /// JSON on stdin, stdout is the result, a non-zero exit makes it an error result.
    /// The command also gets PANTO_TOOL_NAME and PANTO_TOOL_CALL_ID in its environment.
    /// It runs in its own process group, killed as a whole when the call ends, times out
    /// or is cancelled (a daemon it must leave behind needs `setsid`). Repeatable.
    #[arg(long = "tool", value_name = "NAME=COMMAND", value_parser = parse_tool)]
    pub tools: Vec<ToolArg>,

    /// An MCP server whose tools the model may call, as NAME__TOOL: a command started
    /// with its arguments (split like a shell's words, without a shell), or an http(s)
    /// URL of a Streamable HTTP server. Repeatable; replaces a profile's server of the
    /// same name.
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL", value_parser = parse_mcp)]
    pub mcp: Vec<(String, panto::McpServer)>,

    /// JSON array of [{"name","description","parameters"}] describing --tool names
    /// (without an entry a tool gets an empty description and {"type":"object"}). An
    /// entry may carry its "command" too, which makes --tool unnecessary.
    #[arg(long = "tools", value_name = "FILE")]
    pub tools_file: Option<PathBuf>,

    /// Longest run of one tool command, in milliseconds; it is then killed and the
    /// model gets an error result [default: 120000].
    #[arg(long, value_name = "MS")]
    pub tool_timeout_ms: Option<u64>,

    /// Cap on what is read from one tool command, stdout and stderr together: past it
    /// the command is killed and its result cut, ending with an "[output truncated: …]"
    /// line.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::shell_tool::DEFAULT_MAX_OUTPUT_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_tool_output_bytes: u64,

    /// Ask on the terminal before running each tool call (a call refused gets an error
    /// result the model reads). Without a terminal to ask on, the turn pauses at the
    /// first calls instead: the run exits with code 8, leaving its checkpoint
    /// (--checkpoint FILE, else a file it names), for `panto resume FILE --approve
    /// CALL_ID` or `--reject CALL_ID=REASON`.
    #[arg(long)]
    pub confirm: bool,

    /// Conversation file: loaded if it exists, saved after every turn (also after a
    /// failed or cancelled one), written atomically with mode 0600 for a new file. A
    /// symlink is followed to its target. Locked while panto runs (FILE.lock): a second
    /// panto on the same file fails with exit code 2.
    #[arg(long, value_name = "FILE", conflicts_with = "continue_last")]
    pub session: Option<PathBuf>,

    /// Continue the last conversation (every conversation is kept under
    /// $XDG_STATE_HOME/panto/conversations/).
    #[arg(short = 'c', long = "continue")]
    pub continue_last: bool,

    /// Print every event as one line of canonical JSON (and a final error line on
    /// failure) instead of human output. Text is kept exact there (JSON escapes control
    /// characters); human output removes escape sequences coming from the model, the
    /// server or tools, and shows other control characters as symbols (␀, ␇, ␡, …).
    #[arg(long)]
    pub json: bool,

    /// Only the answer (and errors): no tool lines, reasoning, spinner or usage.
    #[arg(short = 'q', long, conflicts_with = "json")]
    pub quiet: bool,

    /// Do not show the model's reasoning.
    #[arg(long)]
    pub hide_reasoning: bool,

    /// Set by `chat`, not a flag: turns on chat's defaults (automatic compaction).
    #[arg(skip)]
    pub interactive_chat: bool,

    /// Print the final answer once it is complete instead of streaming it.
    #[arg(long, conflicts_with = "json")]
    pub no_stream: bool,
}

/// One `--mcp NAME=COMMAND|URL`.
fn parse_mcp(s: &str) -> Result<(String, panto::McpServer), String> {
    let (name, rest) = s
        .split_once('=')
        .ok_or("expected NAME=COMMAND or NAME=URL")?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the MCP server's NAME is empty (expected NAME=COMMAND|URL)".to_owned());
    }
    let rest = rest.trim();
    if rest.starts_with("http://") || rest.starts_with("https://") {
        return Ok((name.to_owned(), panto::McpServer::http(rest)));
    }
    let mut words = split_words(rest)?.into_iter();
    let command = words
        .next()
        .ok_or_else(|| format!("the command of MCP server {name:?} is empty"))?;
    Ok((name.to_owned(), panto::McpServer::stdio(command, words)))
}

/// Words as a shell splits them — whitespace, '…', "…" and backslash escapes — with
/// nothing else a shell does (no variables, globs or redirections).
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("an unterminated ' in the command".to_owned()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err("a \\ at the end of the command".to_owned()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("an unterminated \" in the command".to_owned()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("a \\ at the end of the command".to_owned()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// One `--tool NAME=COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolArg {
    pub name: String,
    pub command: String,
}

fn parse_tool(s: &str) -> Result<ToolArg, String> {
    let Some((name, command)) = s.split_once('=') else {
        return Err("expected NAME=COMMAND".to_owned());
    };
    let name = name.trim();
    if name.is_empty() {
        return Err("the tool NAME is empty (expected NAME=COMMAND)".to_owned());
    }
    if command.trim().is_empty() {
        return Err(format!("the command of tool {name:?} is empty"));
    }
    Ok(ToolArg {
        name: name.to_owned(),
        command: command.to_owned(),
    })
}

fn parse_fallback(s: &str) -> Result<(panto::ProviderKind, String), String> {
    let Some((provider, model)) = s.split_once(':') else {
        return Err("expected PROVIDER:MODEL".to_owned());
    };
    let kind = panto::ProviderKind::parse(provider.trim()).ok_or_else(|| {
        format!(
            "{provider:?} is not a provider (one of {})",
            panto::provider::NAMES.join(", ")
        )
    })?;
    let model = model.trim();
    if model.is_empty() {
        return Err("the model is missing (expected PROVIDER:MODEL)".to_owned());
    }
    Ok((kind, model.to_owned()))
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let Some((name, value)) = s.split_once(':') else {
        return Err("expected NAME:VALUE".to_owned());
    };
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!(
            "{name:?} is not a header name (expected NAME:VALUE)"
        ));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

/// The clap command with what is only known at run time: where the config file is.
pub fn command() -> clap::Command {
    let files = format!(
        "Files:\n  config        {}\n  conversations {}\n  chat history  {}\n\n{EXIT_CODES_HELP}",
        crate::paths::config_file().display(),
        crate::paths::conversations_dir().display(),
        crate::paths::chat_history_file().display(),
    );
    Cli::command()
        .after_help(files.clone())
        .mut_subcommand("run", |c| c.after_help(files.clone()))
        .mut_subcommand("chat", |c| c.after_help(files))
}

/// Parses `args` (program name first). A command line that names no subcommand is a
/// `run`: `panto "hello"`, `panto -m gpt-4o hi`.
pub fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let first = command().try_get_matches_from(args.clone());
    let error = match first {
        Ok(matches) => return Cli::from_arg_matches(&matches),
        Err(e) => e,
    };
    let no_subcommand = matches!(
        error.kind(),
        ClapErrorKind::InvalidSubcommand | ClapErrorKind::UnknownArgument
    );
    // A line that starts with a subcommand is that subcommand's, errors included: a
    // stray word after `resume FILE` (an answer without its flag) must not become the
    // prompt of a new run.
    let names_a_subcommand = args
        .get(1)
        .and_then(|word| word.to_str())
        .is_some_and(|word| {
            command()
                .get_subcommands()
                .any(|sub| sub.get_name() == word)
        });
    if !no_subcommand || args.len() < 2 || names_a_subcommand {
        return Err(error);
    }
    let mut as_run = args;
    as_run.insert(1, OsString::from("run"));
    let matches = command().try_get_matches_from(as_run)?;
    Cli::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Cli, clap::Error> {
        parse(words.iter().map(OsString::from).collect())
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn mcp_flags_are_commands_or_urls() {
        let (name, s) = parse_mcp("time=uvx 'mcp server' \"a b\" c\\ d --tz=UTC").unwrap();
        assert_eq!(name, "time");
        assert_eq!(
            s,
            panto::McpServer::stdio("uvx", ["mcp server", "a b", "c d", "--tz=UTC"])
        );
        let (_, s) = parse_mcp("docs=https://host/mcp").unwrap();
        assert_eq!(s, panto::McpServer::http("https://host/mcp"));
        assert!(parse_mcp("time").is_err());
        assert!(parse_mcp("=uvx").is_err());
        assert!(parse_mcp("t=  ").is_err());
        assert!(parse_mcp("t=a 'b").is_err());
    }

    #[test]
    fn tool_splits_at_the_first_equals_sign() {
        let t = parse_tool("weather=jq -r '.city == \"x\"'").unwrap();
        assert_eq!(t.name, "weather");
        assert_eq!(t.command, "jq -r '.city == \"x\"'");
        assert!(parse_tool("weather").is_err());
        assert!(parse_tool("=cmd").is_err());
        assert!(parse_tool("w=  ").is_err());
    }

    #[test]
    fn header_splits_at_the_first_colon() {
        assert_eq!(
            parse_header("X-Title: a:b").unwrap(),
            ("X-Title".to_owned(), "a:b".to_owned())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header(": v").is_err());
    }

    #[test]
    fn a_command_line_without_subcommand_is_a_run() {
        for words in [
            &["panto", "hello", "world"][..],
            &["panto", "-m", "x", "hello", "world"],
            &["panto", "run", "hello", "world"],
        ] {
            let cli = parse_words(words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
            let Command::Run(run) = cli.command else {
                panic!("{words:?} is not a run");
            };
            assert_eq!(run.prompt, ["hello", "world"], "{words:?}");
        }
        assert!(matches!(
            parse_words(&["panto", "chat", "-p", "x"]).unwrap().command,
            Command::Chat(_)
        ));
        assert!(parse_words(&["panto", "--bogus-flag", "hi"]).is_err());
        // Not `run "resume turn.json call_1"`.
        assert!(parse_words(&["panto", "resume", "turn.json", "call_1"]).is_err());
    }
}

//! Owns the config file (`config.toml`, see `paths`) and its named profiles: reading,
//! strict checking (an unknown key is a typo that would silently change a request), and
//! picking the profile of this run (`-p`, else `$PANTO_PROFILE`, else the file's
//! `default_profile`). Which setting wins over which is `setup`'s business.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use panto::Error;
use serde::Deserialize;
use serde_json::Value;

use crate::args::Provider;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    default_profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// Every setting a profile can give; all optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub provider: Option<Provider>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub system: Option<String>,
    /// The key itself (the file should then be private).
    pub api_key: Option<String>,
    /// The variable holding the key.
    pub api_key_env: Option<String>,
    /// A command printing the key (`pass show openai`), run with `sh -c`.
    pub api_key_cmd: Option<String>,
    /// Values may name variables as `${VAR}` (Azure's `api-key`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub max_steps: Option<u32>,
    /// `none`, `low`, `medium` or `high` (as `--reasoning`).
    pub reasoning: Option<String>,
    /// As `--reasoning-budget`.
    pub reasoning_budget: Option<u32>,
    /// As `--compat`: `auto`, `openai`, `deepseek`, `ollama`, `vllm` or `generic`.
    pub compat: Option<String>,
    /// As `--store` (openai-responses).
    pub store: Option<bool>,
    /// As `--compact-at`.
    pub compact_at: Option<u64>,
    /// As `--compact-keep`.
    pub compact_keep: Option<u64>,
    /// A tools file, as `--tools` (relative to the config file's directory).
    pub tools_file: Option<PathBuf>,
    /// Tools declared inline, each with its command.
    #[serde(default)]
    pub tools: Vec<ProfileTool>,
    /// MCP servers (`[profiles.NAME.mcp_servers.SERVER]`), with the keys of the core's
    /// `mcp_servers` entries (command, args, env, inherit_env, cwd or url, headers; timeout_ms, …).
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileTool {
    pub name: String,
    pub command: String,
    #[serde(default)]
    pub description: String,
    pub parameters: Option<Value>,
}

/// The profile chosen for this run, if any.
pub struct Chosen {
    pub name: String,
    pub profile: Profile,
    /// Where relative paths of the profile start.
    pub dir: PathBuf,
}

/// The largest config file read (docs/cli.md).
pub const MAX_CONFIG_FILE_BYTES: usize = 1 << 20;

/// Reads the config file and returns the profile this run uses. `explicit_file` is
/// `--config`; a file named there must exist, the default one need not.
pub fn choose(explicit_file: Option<&Path>, flag: Option<&str>) -> Result<Option<Chosen>, Error> {
    let path = explicit_file.map_or_else(crate::paths::config_file, Path::to_path_buf);
    let shown = path.display();
    let file = match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && explicit_file.is_none() => {
            ConfigFile::default()
        }
        _ => {
            let bytes = panto::media::read_file(
                &path,
                MAX_CONFIG_FILE_BYTES,
                "config file",
                "the config file cap",
            )?;
            let text = String::from_utf8(bytes)
                .map_err(|e| Error::config(format!("config file {shown}: {e}")))?;
            toml::from_str::<ConfigFile>(&text)
                .map_err(|e| Error::config(format!("config file {shown}: {}", one_line(&e))))?
        }
    };
    let from_env = std::env::var("PANTO_PROFILE")
        .ok()
        .filter(|s| !s.is_empty());
    let (name, source) = match (flag, from_env, &file.default_profile) {
        (Some(name), _, _) => (name.to_owned(), "-p"),
        (None, Some(name), _) => (name, "PANTO_PROFILE"),
        (None, None, Some(name)) => (name.clone(), "default_profile"),
        (None, None, None) => return Ok(None),
    };
    let Some(profile) = file.profiles.get(&name).cloned() else {
        let known: Vec<&str> = file.profiles.keys().map(String::as_str).collect();
        let known = if known.is_empty() {
            format!("{shown} defines no profiles")
        } else {
            format!("known in {shown}: {}", known.join(", "))
        };
        return Err(Error::config(format!(
            "{source} {name}: no such profile ({known})"
        )));
    };
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    Ok(Some(Chosen { name, profile, dir }))
}

/// toml's messages span several lines with a source excerpt; the first says it all
/// with the line and column.
fn one_line(e: &toml::de::Error) -> String {
    let message = e.message().trim();
    match e.span() {
        Some(span) => format!("{message} (at byte {})", span.start),
        None => message.to_owned(),
    }
}

/// `${VAR}` in `value` replaced by the variable's value; an unset variable is an error
/// naming it (a header silently sent empty would fail far from its cause).
pub fn expand_vars(value: &str, what: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(Error::config(format!("{what}: unclosed ${{ in the value")));
        };
        let var = &after[..end];
        match std::env::var(var) {
            Ok(v) => out.push_str(&v),
            Err(_) => return Err(Error::config(format!("{what}: ${{{var}}} is not set"))),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_profile_parses_and_typos_do_not() {
        let file: ConfigFile = toml::from_str(
            r#"
            default_profile = "local"
            [profiles.local]
            provider = "openai"
            base_url = "http://localhost:11434/v1"
            model = "qwen3"
            system = "Be brief."
            api_key_env = "LOCAL_KEY"
            headers = { "X-Title" = "panto" }
            temperature = 0.2
            [[profiles.local.tools]]
            name = "date"
            command = "date"
            description = "The date"
            parameters = { type = "object", properties = {} }
            "#,
        )
        .expect("parses");
        let local = &file.profiles["local"];
        assert_eq!(local.provider, Some(Provider::OpenAi));
        assert_eq!(
            local.tools[0].parameters.as_ref().unwrap()["type"],
            "object"
        );
        let typo = toml::from_str::<ConfigFile>("[profiles.x]\nmodle = \"m\"\n");
        assert!(typo.unwrap_err().message().contains("modle"));
    }

    /// docs/cli.md's example config file is one panto reads.
    #[test]
    fn the_readme_example_parses() {
        let readme = include_str!("../../docs/cli.md");
        let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let file: ConfigFile = toml::from_str(&readme[start..end]).expect("parses");
        for name in ["openai", "claude", "ollama", "vllm", "openrouter", "azure"] {
            assert!(file.profiles.contains_key(name), "no profile {name}");
        }
        assert_eq!(file.default_profile.as_deref(), Some("openai"));
    }

    #[test]
    fn variables_expand_and_unset_ones_are_named() {
        std::env::set_var("PANTO_TEST_EXPAND", "v");
        assert_eq!(
            expand_vars("a ${PANTO_TEST_EXPAND} b", "h").unwrap(),
            "a v b"
        );
        let e = expand_vars("${PANTO_TEST_UNSET_VAR}", "h").unwrap_err();
        assert!(e.message.contains("PANTO_TEST_UNSET_VAR"));
        assert!(expand_vars("${OPEN", "h").is_err());
    }
}

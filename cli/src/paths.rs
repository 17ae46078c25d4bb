//! Owns where panto keeps files of its own, following the XDG base directories: the
//! config file under `$XDG_CONFIG_HOME/panto/` and what panto remembers (conversations,
//! the chat prompt's history) under `$XDG_STATE_HOME/panto/`, with the usual
//! `~/.config` and `~/.local/state` when the variables are unset or not absolute.

use std::path::PathBuf;

fn base(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var).map(PathBuf::from) {
        // The specification says a relative value is invalid and must be ignored.
        Some(dir) if dir.is_absolute() => dir,
        _ => {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(fallback)
        }
    }
}

/// `$PANTO_CONFIG`, else `$XDG_CONFIG_HOME/panto/config.toml`.
pub fn config_file() -> PathBuf {
    match std::env::var_os("PANTO_CONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => base("XDG_CONFIG_HOME", ".config").join("panto/config.toml"),
    }
}

pub fn state_dir() -> PathBuf {
    base("XDG_STATE_HOME", ".local/state").join("panto")
}

/// Every conversation not given a `--session` file is saved here.
pub fn conversations_dir() -> PathBuf {
    state_dir().join("conversations")
}

/// Names the conversation `--continue` resumes.
pub fn last_conversation_file() -> PathBuf {
    state_dir().join("last-conversation")
}

pub fn chat_history_file() -> PathBuf {
    state_dir().join("chat-history")
}

/// Creates `dir` (and its parents) readable by the owner only: conversations are
/// private.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

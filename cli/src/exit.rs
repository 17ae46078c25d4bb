//! Owns the process exit codes: the one mapping from an error kind to a code, and the
//! table `--help` prints. Scripts branch on these codes, so they are part of the CLI's
//! contract and must not change silently.

use panto::ErrorKind;

/// Success.
pub const OK: u8 = 0;

/// The turn paused: calls wait for an answer (approval under `--confirm` without a
/// terminal); its checkpoint is left for `panto resume`.
pub const PAUSED: u8 = 8;

/// stdout was closed by its reader (`panto … | head`): what a shell reports for a
/// program ended by SIGPIPE, which is how other tools end there.
pub const STDOUT_CLOSED: u8 = 141;

/// The exit-code table shown after `--help` (kept next to [`exit_code`]; a unit test
/// checks that they agree).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success
  2    usage error, or error kind config (also: the --session file is in use by
       another panto process)
  3    authentication, permission, bad_request, not_found
  4    rate_limited, server, provider
  5    connection, timeout
  6    protocol, incomplete
  7    output_invalid, output_refused, output_truncated (run --schema: the answer did
       not match the schema after its repair, was refused, or was cut at max_tokens)
  8    the turn paused: tool calls wait for approval (--confirm without a terminal);
       its checkpoint file is left for `panto resume FILE --approve CALL_ID`
  70   internal, tool (the turn passed --max-tool-calls), busy (never seen)
  130  cancelled by Ctrl-C, SIGTERM or SIGHUP (the --session file is still saved and
       valid; tool processes are killed)
  141  stdout was closed by its reader (as in `panto … | head`); nothing is printed";

/// The exit code for a failure of kind `kind`. A kind added to the core later maps to
/// 70 until it is placed; the help-table test lists every kind the core knows.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Config => 2,
        ErrorKind::Authentication
        | ErrorKind::Permission
        | ErrorKind::BadRequest
        | ErrorKind::NotFound => 3,
        ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Provider => 4,
        ErrorKind::Connection | ErrorKind::Timeout => 5,
        ErrorKind::Protocol | ErrorKind::Incomplete => 6,
        ErrorKind::OutputInvalid | ErrorKind::OutputRefused | ErrorKind::OutputTruncated => 7,
        ErrorKind::Cancelled => 130,
        ErrorKind::Internal | ErrorKind::Tool | ErrorKind::Busy => 70,
        _ => 70,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind appears in the help table on the line of its code.
    #[test]
    fn help_table_matches_the_mapping() {
        for kind in ErrorKind::ALL {
            let code = exit_code(kind).to_string();
            let line = EXIT_CODES_HELP
                .lines()
                .find(|l| l.split_whitespace().next() == Some(code.as_str()))
                .unwrap_or_else(|| panic!("no help line for code {code}"));
            let named = line
                .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .any(|word| word == kind.as_str());
            assert!(
                named,
                "kind {kind} (code {code}) is not named on its line: {line}"
            );
        }
    }
}

//! Prints the core's vocabulary description (`panto::vocab::describe`) as pretty JSON on
//! stdout: the input of `scripts/gen.sh`, which generates the Go and Python bindings'
//! types from it and checks the C header and the docs against it.

use std::io::Write;

fn main() {
    let text = match serde_json::to_string_pretty(&panto::vocab::describe()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("panto-gen: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{text}").is_err() {
        std::process::exit(1);
    }
}

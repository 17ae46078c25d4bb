//! `PANTO_WORKER_THREADS`, read once, when the worker pool starts. The pool is the
//! process's, so each case runs this test binary again as a child process with the
//! variable set (or not), and reads what the child reports.

use std::process::Command;

use panto::{Agent, Config, ProviderKind};
use panto_pull::{worker_threads, AgentStreamExt, WORKER_THREADS_VAR};

/// Set in a child: `child_reports_its_pool` reports instead of returning at once.
const CHILD: &str = "PANTO_TEST_WORKER_THREADS_CHILD";

/// Run by the cases below in a child process; does nothing in the test run itself.
#[test]
fn child_reports_its_pool() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    println!("workers={}", worker_threads());
    // Nothing listens on port 9 of loopback: a stream that does start fails later, with
    // a connection error; one that cannot start fails here.
    let agent = Agent::new(
        Config::new(ProviderKind::OpenAi, "m")
            .with_base_url("http://127.0.0.1:9/v1")
            .with_api_key("k"),
    )
    .unwrap();
    match agent.stream("hi") {
        Ok(_) => println!("stream=started"),
        Err(e) => println!("stream=failed {:?}: {}", e.kind, e.message),
    }
}

/// What the child reports with `PANTO_WORKER_THREADS` set to `value` (unset for `None`).
fn child(value: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_reports_its_pool",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1");
    match value {
        Some(v) => cmd.env(WORKER_THREADS_VAR, v),
        None => cmd.env_remove(WORKER_THREADS_VAR),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn unset_the_pool_has_a_worker_per_core_but_one() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let out = child(None);
    let expected = cores.saturating_sub(1).clamp(1, 64);
    assert!(out.contains(&format!("workers={expected}\n")), "{out}");
    assert!(out.contains("stream=started"), "{out}");
}

#[test]
fn panto_worker_threads_sets_how_many_workers_start() {
    for n in ["1", "3"] {
        let out = child(Some(n));
        assert!(out.contains(&format!("workers={n}\n")), "{out}");
        assert!(out.contains("stream=started"), "{out}");
    }
}

#[test]
fn a_worker_count_panto_cannot_use_fails_every_stream_with_a_config_error() {
    let out = child(Some("lots"));
    assert!(out.contains("workers=0\n"), "{out}");
    assert!(
        out.contains(
            r#"stream=failed Config: PANTO_WORKER_THREADS="lots": expected a whole number"#
        ),
        "{out}"
    );
}

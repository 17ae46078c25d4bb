//! The `panto-testserver` binary: handshake line, serving, exit codes, lifetime.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use common::{tests_path, Client};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_panto-testserver");

/// Starts the binary and returns it with the address from its first stdout line.
fn spawn(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .strip_prefix("listening on http://127.0.0.1:")
        .map(|port| format!("127.0.0.1:{}", port.trim_end()))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (child, url)
}

#[test]
fn serves_a_scenario_file_and_exits_on_stdin_eof() {
    let scenario = tests_path("server/scenarios/demo-weather.json");
    let (mut child, addr) = spawn(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--exit-on-stdin-eof",
    ]);
    let mut c = Client::connect_addr(&addr);
    let r = c.post_json("/v1/chat/completions", &json!({"stream": true}));
    assert_eq!(r.status, 200);
    assert!(r.text().contains("\"call_1\""));
    let reqs = c.get("/_panto/requests").json();
    assert_eq!(reqs.as_array().unwrap().len(), 1);
    drop(c);

    drop(child.stdin.take()); // EOF on the server's stdin
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn serves_a_capture_with_chunk_size() {
    let capture = tests_path("fixtures/real/anthropic/haiku-4-5-text-utf8.sse");
    let expected = std::fs::read(&capture).unwrap();
    let (mut child, addr) = spawn(&[
        "--capture",
        capture.to_str().unwrap(),
        "--chunk-size=5",
        "--exit-on-stdin-eof",
    ]);
    let r = Client::connect_addr(&addr).post_json("/v1/messages", &json!({}));
    assert_eq!(r.body, expected);
    assert!(r.chunks.iter().all(|c| c.len() <= 5));
    child.stdin.take().unwrap().write_all(b"ignored\n").unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_arguments_and_bad_scenarios_exit_2() {
    let bad_dir = std::env::temp_dir().join(format!("panto-ts-bin-{}", std::process::id()));
    std::fs::create_dir_all(&bad_dir).unwrap();
    let bad_file = bad_dir.join("bad.json");
    std::fs::write(
        &bad_file,
        br#"{"exchanges":[{"response":{"sse":[{"dta":1}]}}]}"#,
    )
    .unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--bogus".into()],
        vec!["--port".into()],
        vec!["--port".into(), "99999".into()],
        vec!["--chunk-size".into(), "3".into()],
        vec!["--scenario".into(), "/nonexistent.json".into()],
        vec!["--scenario".into(), bad_file.to_string_lossy().into_owned()],
    ];
    for args in cases {
        let out = Command::new(BIN)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("panto-testserver: "),
            "{args:?}: {stderr}"
        );
    }
    let out = Command::new(BIN)
        .args(["--scenario", &bad_file.to_string_lossy()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exchanges[0].response.sse[0]") && stderr.contains("dta"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&bad_dir);
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_server() {
    let (mut child, addr) = spawn(&[]);
    // No scenario: requests are mismatches, but the server answers.
    assert_eq!(Client::connect_addr(&addr).get("/x").status, 404);
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// How many of a process's descriptors are sockets.
#[cfg(target_os = "linux")]
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn a_connection_costs_the_server_one_descriptor() {
    // The 10,000-stream bench runs under a 20,000-descriptor limit: a second descriptor
    // per connection (a duplicate kept to shut it down from outside its task) would not fit.
    let scenario = tests_path("server/scenarios/demo-weather.json");
    let (mut child, addr) = spawn(&["--scenario", scenario.to_str().unwrap()]);
    let before = sockets_of(child.id());
    let mut clients: Vec<Client> = (0..20).map(|_| Client::connect_addr(&addr)).collect();
    for c in &mut clients {
        // An answer means the server accepted and registered the connection.
        assert_eq!(c.get("/_panto/stats").status, 200);
    }
    let during = sockets_of(child.id());
    drop(clients);
    let closed = panto_testkit::poll_until(panto_testkit::wait::HANG_GUARD, || {
        sockets_of(child.id()) == before
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(during, before + 20, "one descriptor per open connection");
    assert!(
        closed,
        "the server closes its sockets when the clients leave"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_stopped_server_queues_a_burst_of_connects() {
    // A server that cannot accept for a moment (a loaded machine) must not drop a burst of
    // connects: past the listen backlog the kernel drops SYNs and the clients retry them 1,
    // 3, 7… s later. `std`'s listeners ask for 128; the server asks for 4,096, which the
    // kernel caps at somaxconn.
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let n = 1000.min(somaxconn.saturating_sub(1));
    if n < 256 {
        eprintln!("skipped: net.core.somaxconn is {somaxconn}, a backlog past 128 cannot show");
        return;
    }
    let scenario = tests_path("server/scenarios/demo-weather.json");
    let (mut child, addr) = spawn(&["--scenario", scenario.to_str().unwrap()]);
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let sockets: Vec<socket2::Socket> = (0..n)
        .map(|_| {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            // EINPROGRESS: the handshake completes in the kernel, with no accept needed.
            let _ = s.connect(&addr.into());
            s
        })
        .collect();
    let connected = || sockets.iter().filter(|s| s.peer_addr().is_ok()).count();
    let all = panto_testkit::poll_until(panto_testkit::wait::HANG_GUARD, || connected() == n);
    let got = connected();
    signal("-CONT");
    drop(sockets);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        all,
        "{got} of {n} connects completed while the server was stopped"
    );
}

//! Runs turns against an OpenAI-compatible server and counts their text chunks: a small
//! client to profile the adapter with (`valgrind --tool=callgrind`, `perf`, `time`),
//! one process per way of consuming the turn, against a server in another process.
//!
//! ```text
//! cargo run --release -p panto-pull --example turns -- MODE BASE_URL TURNS
//! ```
//!
//! MODE is `push` (`Agent::run` with a counting receiver on a current-thread runtime),
//! `pull` (`Stream::next`), `pull-async` (`Stream::next_async` on a current-thread
//! runtime) or `pull-fd` (`try_next` until `Pending`, waiting in `poll` on the stream's
//! readiness descriptor). Prints the number of text chunks seen over all turns.

use std::time::Duration;

use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl, TurnOptions};
use panto_pull::{AgentStreamExt, Next, Stream};

struct Count(u64);

impl Receiver for Count {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::ContentDelta { .. }) {
            self.0 += 1;
        }
        Flow::Continue
    }
}

fn count(event: &Event) -> u64 {
    u64::from(matches!(event, Event::ContentDelta { .. }))
}

fn pull(stream: &mut Stream) -> u64 {
    let mut n = 0;
    while let Some(ev) = stream.next().expect("turn") {
        n += count(&ev);
    }
    n
}

async fn pull_async(stream: &mut Stream) -> u64 {
    let mut n = 0;
    while let Some(ev) = stream.next_async().await.expect("turn") {
        n += count(&ev);
    }
    n
}

#[cfg(unix)]
fn pull_fd(stream: &mut Stream) -> u64 {
    let fd = stream.readiness_fd().expect("readiness descriptor");
    let mut n = 0;
    loop {
        match stream.try_next().expect("turn") {
            Next::Event(ev) => n += count(&ev),
            Next::Done => return n,
            Next::Pending => {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd on the stack.
                unsafe { libc::poll(&mut p, 1, -1) };
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!(
            "usage: {} push|pull|pull-async|pull-fd BASE_URL TURNS",
            args[0]
        );
        std::process::exit(2);
    }
    let (mode, base_url) = (args[1].as_str(), args[2].clone());
    let turns: u32 = args[3].parse().expect("TURNS is a number");
    let config = Config::new(ProviderKind::OpenAi, "gpt-4o")
        .with_base_url(base_url)
        .with_api_key("sk-bench");
    let agent = Agent::new(config).expect("agent");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut chunks = 0;
    for _ in 0..turns {
        chunks += match mode {
            "push" => {
                let mut c = Count(0);
                rt.block_on(agent.run(
                    "bench",
                    &mut c,
                    &TurnControl::default(),
                    TurnOptions::default(),
                ))
                .expect("turn");
                c.0
            }
            "pull" => pull(&mut agent.stream("bench").expect("stream")),
            "pull-async" => rt.block_on(pull_async(&mut agent.stream("bench").expect("stream"))),
            #[cfg(unix)]
            "pull-fd" => pull_fd(&mut agent.stream("bench").expect("stream")),
            _ => {
                eprintln!("unknown mode {mode}");
                std::process::exit(2);
            }
        };
    }
    // Let the pool's threads go quiet before exit (a profile then ends at a clean point).
    std::thread::sleep(Duration::from_millis(1));
    println!("{chunks}");
}

//! Running one turn of an agent in a test: every event collected, under a hang guard.

use std::time::Duration;

use panto::{Agent, Collect, Event, Input, TurnControl, TurnOptions, TurnSummary};

/// How long a test turn may take before the test calls it hung (a hang catcher only:
/// no test waits for it).
pub const TURN_HANG_GUARD: Duration = Duration::from_secs(90);

/// Runs a turn of `agent` on `input` with a default control and options: its events, in
/// order, and its result. Panics if the turn hangs past [`TURN_HANG_GUARD`].
pub async fn turn(
    agent: &Agent,
    input: impl Into<Input>,
) -> (Vec<Event>, panto::Result<TurnSummary>) {
    turn_with(
        agent,
        input,
        &TurnControl::default(),
        TurnOptions::default(),
    )
    .await
}

/// [`turn`] with the caller's `control` and `options`.
pub async fn turn_with(
    agent: &Agent,
    input: impl Into<Input>,
    control: &TurnControl,
    options: TurnOptions,
) -> (Vec<Event>, panto::Result<TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        TURN_HANG_GUARD,
        agent.run(input, &mut events, control, options),
    )
    .await
    .expect("the turn hung");
    (events.0, r)
}

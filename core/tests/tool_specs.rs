//! Tool declarations are checked when they are registered — host tools when the agent is
//! made (`Config::validate`, so every binding's configuration), Rust tools by
//! `Agent::add_tool` — against what the providers accept: a name matching
//! `^[a-zA-Z0-9_-]{1,64}$` and parameters that are a JSON Schema with `"type": "object"`.
//! A bad one is a `config` error naming the tool, never a provider's 400 later.

use panto::{Agent, Config, ErrorKind, FnTool, ProviderKind, ToolOutput, ToolSpec};
use serde_json::{json, Value};

fn config() -> Config {
    Config::new(ProviderKind::OpenAi, "m")
        .with_base_url("http://127.0.0.1:9/v1")
        .with_api_key("sk-test")
}

fn host(name: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: "d".into(),
        parameters,
        needs_approval: false,
        external: false,
    }
}

fn object() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}})
}

fn bad_names() -> Vec<String> {
    vec![
        "get weather".into(), // a space
        "get.weather".into(), // a dot
        "wetter_äöü".into(),  // not ASCII
        "a/b".into(),
        "x".repeat(65), // one too long
        "tab\there".into(),
    ]
}

#[test]
fn good_declarations_pass() {
    for name in ["w", "get_weather", "Get-Weather-2", &"x".repeat(64)] {
        let agent = Agent::new(config().with_host_tool(host(name, object()))).unwrap();
        let rust = FnTool::new(
            format!("{name}_rs")
                .chars()
                .rev()
                .take(64)
                .collect::<String>(),
            "d",
            object(),
            |_: Value, _| async { ToolOutput::ok("") },
        );
        agent.add_tool(rust).unwrap();
    }
    // The JSON form's default parameters are a valid schema.
    Agent::from_json(
        r#"{"model":"m","base_url":"http://127.0.0.1:9/v1","api_key":"","tools":[{"name":"t"}]}"#,
    )
    .unwrap();
}

#[test]
fn a_host_tool_with_a_bad_name_fails_agent_creation_naming_it() {
    for name in bad_names() {
        let err = Agent::new(
            config()
                .with_host_tool(host("ok", object()))
                .with_host_tool(host(&name, object())),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config, "{name:?}");
        assert!(
            err.message.starts_with("tools[1].name: tool ")
                && err.message.contains(&format!("{name:?}"))
                && err
                    .message
                    .contains("1 to 64 ASCII letters, digits, '_' or '-'"),
            "{name:?}: {}",
            err.message
        );
        // The JSON form every binding uses gets the same check.
        let json = json!({"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "",
            "tools": [{"name": name}]})
        .to_string();
        let err = Agent::from_json(&json).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert!(
            err.message.starts_with("tools[0].name: tool "),
            "{}",
            err.message
        );
    }
}

#[test]
fn a_host_tool_whose_parameters_are_not_an_object_schema_fails_naming_it() {
    for (parameters, says) in [
        (
            json!({"type": "array", "items": {}}),
            r#"has "type": "array""#,
        ),
        (json!({"properties": {}}), r#"has no "type""#),
        (json!("object"), "is a string"),
        (json!(null), "is null"),
        (json!([]), "is an array"),
    ] {
        let err =
            Agent::new(config().with_host_tool(host("lookup", parameters.clone()))).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config, "{parameters}");
        assert!(
            err.message.starts_with(r#"tools[0].parameters: tool "lookup": must be a JSON Schema object with "type": "object""#)
                && err.message.contains(says),
            "{parameters}: {}",
            err.message
        );
    }
}

#[test]
fn a_rust_tool_with_a_bad_name_or_schema_is_refused_by_add_tool_naming_it() {
    let agent = Agent::new(config()).unwrap();
    for name in bad_names() {
        let tool = FnTool::new(name.clone(), "d", object(), |_: Value, _| async {
            ToolOutput::ok("")
        });
        let err = agent.add_tool(tool).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert!(
            err.message.starts_with(&format!(
                "tool {name:?}: name: {name:?} is not a valid tool name"
            )),
            "{}",
            err.message
        );
    }
    let tool = FnTool::new(
        "lookup",
        "d",
        json!({"type": "string"}),
        |_: Value, _| async { ToolOutput::ok("") },
    );
    let err = agent.add_tool(tool).unwrap_err();
    assert!(
        err.message
            .starts_with(r#"tool "lookup": parameters: must be a JSON Schema object"#),
        "{}",
        err.message
    );
    assert!(agent.tool_specs().is_empty(), "nothing bad was registered");
}

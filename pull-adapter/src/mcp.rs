//! Owns what the bindings ask an agent's MCP servers outside a turn — their resources
//! and prompts — as blocking calls that answer JSON, each run on the agent's worker
//! thread by [`crate::block_on_worker`] (cancellable through its token). The answers'
//! shapes are the core's (`panto::McpResource::to_value` and the rest); this module
//! only picks the server, runs the call and writes the JSON.

use std::collections::BTreeMap;

use panto::{Agent, CancellationToken, Error, McpServers};
use serde_json::Value;

use crate::block_on_worker;

/// The agent's MCP servers, or the `config` error of an agent without any.
fn servers_of<'a>(agent: &'a Agent, what: &str) -> Result<&'a McpServers, Error> {
    agent
        .mcp_servers()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Error::config(format!(
                "{what}: the agent has no MCP servers (mcp_servers)"
            ))
        })
}

fn array(items: Vec<Value>) -> String {
    Value::Array(items).to_string()
}

/// The resources of the agent's MCP server `server` (every server's, in order, when
/// `None`), as a JSON array of `{"server","uri","name","title"?,"description"?,
/// "mime_type"?,"size"?}`; the servers start first if they were not running.
pub fn mcp_resources(
    agent: &Agent,
    server: Option<&str>,
    cancel: &CancellationToken,
) -> Result<String, Error> {
    const WHAT: &str = "mcp_resources";
    let server = server.map(str::to_owned);
    block_on_worker(agent, WHAT, cancel, move |agent, cancel| async move {
        let set = servers_of(&agent, WHAT)?;
        let listed = match &server {
            Some(name) => set.resources(name, &cancel).await?,
            None => set.all_resources(&cancel).await?,
        };
        Ok(array(listed.iter().map(|r| r.to_value()).collect()))
    })
}

/// Reads the resource `uri` (from `server`; when `None`, the only server, else the one
/// that lists it), as `{"contents":[{"uri","mime_type"?,"text"|"blob","part"}]}`: a
/// blob in base64, `part` the content as a part of a turn's input.
pub fn mcp_read_resource(
    agent: &Agent,
    server: Option<&str>,
    uri: &str,
    cancel: &CancellationToken,
) -> Result<String, Error> {
    const WHAT: &str = "mcp_read_resource";
    let server = server.map(str::to_owned);
    let uri = uri.to_owned();
    block_on_worker(agent, WHAT, cancel, move |agent, cancel| async move {
        let set = servers_of(&agent, WHAT)?;
        let name = set
            .server_of_resource(server.as_deref(), &uri, &cancel)
            .await?;
        let contents = set.read_resource(&name, &uri, &cancel).await?;
        Ok(panto::mcp::resource_contents_to_value(&contents).to_string())
    })
}

/// The prompts of the agent's MCP server `server` (every server's when `None`), as a
/// JSON array of `{"server","name","title"?,"description"?,"arguments":[{"name",
/// "description"?,"required"}]}`.
pub fn mcp_prompts(
    agent: &Agent,
    server: Option<&str>,
    cancel: &CancellationToken,
) -> Result<String, Error> {
    const WHAT: &str = "mcp_prompts";
    let server = server.map(str::to_owned);
    block_on_worker(agent, WHAT, cancel, move |agent, cancel| async move {
        let set = servers_of(&agent, WHAT)?;
        let listed = match &server {
            Some(name) => set.prompts(name, &cancel).await?,
            None => set.all_prompts(&cancel).await?,
        };
        Ok(array(listed.iter().map(|p| p.to_value()).collect()))
    })
}

/// The prompt `name` filled in with `arguments` (a JSON object of strings, or `None`),
/// from `server` (when `None`, the only server, else the one that lists it), as
/// `{"description"?,"messages":[{"role","content":[parts]}]}`. Arguments that are not
/// such an object are a `config` error, with nothing sent.
pub fn mcp_get_prompt(
    agent: &Agent,
    server: Option<&str>,
    name: &str,
    arguments: Option<&str>,
    cancel: &CancellationToken,
) -> Result<String, Error> {
    const WHAT: &str = "mcp_get_prompt";
    let arguments = prompt_arguments(arguments)?;
    let server = server.map(str::to_owned);
    let name = name.to_owned();
    block_on_worker(agent, WHAT, cancel, move |agent, cancel| async move {
        let set = servers_of(&agent, WHAT)?;
        let from = set
            .server_of_prompt(server.as_deref(), &name, &cancel)
            .await?;
        let got = set.get_prompt(&from, &name, &arguments, &cancel).await?;
        Ok(got.to_value().to_string())
    })
}

/// A prompt's arguments from their JSON: an object whose values are strings.
fn prompt_arguments(json: Option<&str>) -> Result<BTreeMap<String, String>, Error> {
    let Some(json) = json else {
        return Ok(BTreeMap::new());
    };
    let bad = || Error::config("mcp_get_prompt: the arguments must be a JSON object of strings");
    let value: Value = serde_json::from_str(json).map_err(|_| bad())?;
    let Value::Object(o) = value else {
        return Err(bad());
    };
    o.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(Error::config(format!(
                "mcp_get_prompt: the argument {k:?} must be a string"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_arguments_are_an_object_of_strings() {
        assert!(prompt_arguments(None).unwrap().is_empty());
        assert_eq!(
            prompt_arguments(Some(r#"{"a":"b"}"#)).unwrap(),
            BTreeMap::from([("a".to_owned(), "b".to_owned())])
        );
        for bad in ["[]", "{\"a\":1}", "nope"] {
            let e = prompt_arguments(Some(bad)).unwrap_err();
            assert_eq!(e.kind, panto::ErrorKind::Config, "{bad}");
        }
    }
}

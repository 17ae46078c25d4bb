//! Rich turns against `panto-testserver`: images and documents in a turn's input and in
//! tool results — each provider's wire form, the input checks made before anything is
//! sent, saved history, transcript and compaction, and a server that refuses images.

use std::time::Duration;

use base64::Engine;
use panto::provider::ProviderKind;
use panto::{
    Agent, Block, CompactOptions, ErrorKind, Event, FnTool, Input, Media, MediaSource, ToolOutput,
    TurnControl, TurnOptions,
};
use panto_testkit::{config, turn};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

/// A PNG header and some bytes of every value, so a lossy round trip would show.
fn png() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend(0..=255u8);
    v
}

fn pdf() -> Vec<u8> {
    let mut v = b"%PDF-1.4\n".to_vec();
    v.extend((0..=255u8).rev());
    v
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn rich_input() -> Input {
    Input::new()
        .text("Compare these.")
        .image(Media::url("https://example.com/cat.jpg"))
        .image(Media::bytes(png(), None).unwrap())
        .document(Media::bytes(pdf(), None).unwrap().with_name("report.pdf"))
}

#[tokio::test]
async fn openai_gets_image_url_parts_and_a_pdf_file() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "ok",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    turn(&agent, rich_input()).await.1.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png()))}},
            {"type": "file", "file": {"filename": "report.pdf",
                "file_data": format!("data:application/pdf;base64,{}", b64(&pdf()))}},
        ]})
    );
}

#[tokio::test]
async fn a_text_only_input_stays_a_string_for_openai() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "ok",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    turn(&agent, Input::new().text("a").text("b"))
        .await
        .1
        .unwrap();
    assert_eq!(
        server.requests()[0].body["messages"][0],
        json!({"role": "user", "content": "ab"})
    );
}

#[tokio::test]
async fn anthropic_gets_image_and_document_blocks() {
    let server = TestServer::start(script::scenario(vec![exchange(script::anthropic_text(&[
        "ok",
    ]))]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::Anthropic, &server).with_prompt_caching(false)).unwrap();
    let input = rich_input().document(Media::url("https://example.com/a.pdf"));
    turn(&agent, input).await.1.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png())}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(&pdf())}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        ]})
    );
}

#[tokio::test]
async fn inputs_a_provider_cannot_take_fail_before_anything_is_sent() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "ok",
    ]))]))
    .unwrap();
    let mut cfg = config(ProviderKind::OpenAi, &server);
    cfg.max_message_bytes = 1024;
    let agent = Agent::new(cfg).unwrap();
    let big = [b"\x89PNG\r\n\x1a\n".as_slice(), &[7u8; 1100]].concat();
    let cases = [
        (
            Input::new().image(Media::bytes(big, None).unwrap()),
            "input[0]: the image is 1108 bytes, more than max_message_bytes (1024)",
        ),
        (
            Input::new()
                .text("x")
                .document(Media::url("https://example.com/a.pdf")),
            "input[1]: OpenAI chat completions take a PDF as bytes, not by URL",
        ),
        (
            Input::new().image(Media::bytes(b"hello".to_vec(), Some("text/plain")).unwrap()),
            "input[0]: image of type \"text/plain\": not accepted",
        ),
    ];
    for (input, want) in cases {
        let (events, r) = turn(&agent, input).await;
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.message.starts_with(want), "{}", e.message);
        assert!(events.is_empty());
    }
    assert!(server.requests().is_empty(), "nothing was sent");
    assert!(agent.history().is_empty(), "nothing was kept");
}

#[test]
fn an_unreadable_file_is_an_error_naming_its_path() {
    let dir = std::env::temp_dir().join(format!("panto-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-cat.png");
    let e = Input::new().file(&missing).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("no-such-cat.png"), "{}", e.message);
    let text = dir.join("notes.txt");
    std::fs::write(&text, "plain text").unwrap();
    let e = Media::from_path(&text).unwrap_err();
    assert!(
        e.message.contains("notes.txt") && e.message.contains("not a PNG, JPEG, GIF, WebP or PDF"),
        "{}",
        e.message
    );
    let cat = dir.join("cat.png");
    std::fs::write(&cat, png()).unwrap();
    let input = Input::new().file(&cat).unwrap();
    let Block::Image(m) = &input.parts()[0] else {
        panic!("a PNG file is an image")
    };
    assert_eq!(m.media_type(), Some("image/png"));
    assert_eq!(m.name.as_deref(), Some("cat.png"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_saved_history_with_attachments_reloads_byte_exact_and_continues() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_text(&["a cat"])),
        exchange(script::anthropic_text(&["yes"])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::Anthropic, &server).with_prompt_caching(false)).unwrap();
    turn(&agent, rich_input()).await.1.unwrap();
    let saved = agent.history_json();
    assert!(
        saved.contains(&b64(&png())),
        "the bytes are in the saved JSON"
    );

    let restored =
        Agent::new(config(ProviderKind::Anthropic, &server).with_prompt_caching(false)).unwrap();
    restored.load_history_json(&saved).unwrap();
    assert_eq!(restored.history(), agent.history());
    let Block::Image(Media {
        source: MediaSource::Bytes { data, media_type },
        ..
    }) = &restored.history()[0].content[2]
    else {
        panic!("the image is still there")
    };
    assert_eq!((&data[..], media_type.as_str()), (&png()[..], "image/png"));
    assert_eq!(
        restored.history_json(),
        saved,
        "saving again gives the same text"
    );

    turn(&restored, "Is it a cat?").await.1.unwrap();
    let second = &server.requests()[1].body["messages"];
    assert_eq!(
        second[0],
        server.requests()[0].body["messages"][0],
        "the continued turn re-sends the attachments as they were"
    );
    assert_eq!(second[2]["content"], "Is it a cat?");
}

#[tokio::test]
async fn the_transcript_describes_attachments_and_compaction_keeps_a_note() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a cat"])),
        exchange(script::openai_text(&["ok"])),
        json!({"match": {"body_contains": ["<conversation>"]},
            "response": script::openai_text(&["They looked at a cat."])}),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    turn(&agent, rich_input()).await.1.unwrap();
    turn(&agent, "thanks").await.1.unwrap();
    let t: Value = serde_json::from_str(&agent.transcript_json()).unwrap();
    assert_eq!(
        t[1],
        json!({"role": "user", "kind": "attachment", "attachment": "image",
               "text": "https://example.com/cat.jpg"})
    );
    assert_eq!(
        t[2],
        json!({"role": "user", "kind": "attachment", "attachment": "image",
               "media_type": "image/png", "size": 264, "text": "image/png, 264 bytes"})
    );
    assert_eq!(
        t[3],
        json!({"role": "user", "kind": "attachment", "attachment": "document", "name": "report.pdf",
               "media_type": "application/pdf", "size": 265,
               "text": "report.pdf, application/pdf, 265 bytes"})
    );
    assert!(!agent.transcript_json().contains(&b64(&png())));

    let done = agent
        .compact(
            &CompactOptions {
                keep_last: 2,
                ..Default::default()
            },
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(done.changed);
    let raw = String::from_utf8_lossy(&server.requests()[2].raw_body).into_owned();
    assert!(
        !raw.contains(&b64(&png())) && !raw.contains("base64"),
        "no attachment is sent to the summarizer"
    );
    let asked = server.requests()[2].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        asked.contains("User attached image (not shown here): image/png, 264 bytes")
            && asked.contains("User attached document (not shown here): report.pdf"),
        "{asked}"
    );
    // The summarized attachments are gone from the history; the note is in the summary.
    assert!(!agent.history_json().contains(&b64(&png())));
}

#[tokio::test]
async fn a_server_that_refuses_images_fails_the_turn_and_the_history_stays() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["hello"])),
        exchange(json!({"status": 400, "json": {"error": {
            "type": "invalid_request_error",
            "message": "Invalid content type. image_url is only supported by certain models."}}})),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    turn(&agent, "hi").await.1.unwrap();
    let before = agent.history();
    let (events, r) = turn(
        &agent,
        Input::new()
            .text("look")
            .image(Media::bytes(png(), None).unwrap()),
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest);
    assert_eq!(e.status, 400);
    assert!(!e.retryable);
    assert!(
        e.message
            .contains("image_url is only supported by certain models"),
        "{}",
        e.message
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::ProviderRetry { .. })));
    assert_eq!(server.requests().len(), 2, "no retry");
    assert_eq!(agent.history(), before, "the refused input is not kept");
}

fn camera_tool() -> impl panto::Tool {
    FnTool::new(
        "camera",
        "Takes a picture",
        json!({"type": "object"}),
        |_args: Value, _| async move {
            ToolOutput::with_parts(
                vec![
                    Block::text("one picture"),
                    Block::Image(Media::bytes(png(), None).unwrap()),
                ],
                false,
            )
        },
    )
}

#[tokio::test]
async fn anthropic_sends_a_tools_image_inside_its_tool_result() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_tool_calls(&[("call_1", "camera", "{}")])),
        exchange(script::anthropic_text(&["A cat."])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::Anthropic, &server).with_prompt_caching(false)).unwrap();
    agent.add_tool(camera_tool()).unwrap();
    let (events, r) = turn(&agent, "What do you see?").await;
    r.unwrap();
    let (result, parts, json) = events
        .iter()
        .find_map(|e| match e {
            Event::ToolResult { output, parts, .. } => {
                Some((output.clone(), parts.clone(), e.to_json()))
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(result, "one picture");
    // The event carries the parts, and its JSON the image's size and base64 bytes.
    assert_eq!(
        parts,
        vec![
            Block::text("one picture"),
            Block::Image(Media::bytes(png(), None).unwrap())
        ]
    );
    assert!(
        json.ends_with(&format!(
            r#""parts":[{{"type":"text","text":"one picture"}},{{"type":"image","media_type":"image/png","size":{},"data":"{}"}}]}}"#,
            png().len(),
            b64(&png())
        )),
        "{json}"
    );
    let msgs = &server.requests()[1].body["messages"];
    assert_eq!(
        msgs[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "call_1", "is_error": false, "content": [
            {"type": "text", "text": "one picture"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png())}},
        ]})
    );
    // Saved and reloaded, the result keeps its parts.
    let again = Agent::new(config(ProviderKind::Anthropic, &server)).unwrap();
    again.load_history_json(&agent.history_json()).unwrap();
    assert_eq!(again.history(), agent.history());
}

#[tokio::test]
async fn openai_puts_a_tools_image_in_a_user_message_after_the_tool_messages() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("call_1", "camera", "{}"),
            ("call_2", "camera", "{}"),
        ])),
        exchange(script::openai_text(&["Two cats."])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    agent.add_tool(camera_tool()).unwrap();
    turn(&agent, "What do you see?").await.1.unwrap();
    let msgs = server.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(msgs.len(), 5);
    assert_eq!(
        msgs[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "one picture"})
    );
    assert_eq!(msgs[3]["role"], "tool");
    let url = format!("data:image/png;base64,{}", b64(&png()));
    assert_eq!(
        msgs[4],
        json!({"role": "user", "content": [
            {"type": "text", "text": "The image(s) returned by tool camera (call call_1):"},
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "The image(s) returned by tool camera (call call_2):"},
            {"type": "image_url", "image_url": {"url": url}},
        ]})
    );
}

#[tokio::test]
async fn a_tools_oversize_image_is_replaced_by_a_note() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_tool_calls(&[("call_1", "camera", "{}")])),
        exchange(script::anthropic_text(&["ok"])),
    ]))
    .unwrap();
    let mut cfg = config(ProviderKind::Anthropic, &server).with_prompt_caching(false);
    cfg.max_message_bytes = 1024;
    let agent = Agent::new(cfg).unwrap();
    agent
        .add_tool(FnTool::new(
            "camera",
            "",
            json!({"type": "object"}),
            |_args: Value, _| async move {
                let big = [b"\x89PNG\r\n\x1a\n".as_slice(), &[1u8; 2000]].concat();
                ToolOutput::with_parts(vec![Block::Image(Media::bytes(big, None).unwrap())], false)
            },
        ))
        .unwrap();
    turn(&agent, "go").await.1.unwrap();
    let content = &server.requests()[1].body["messages"][2]["content"][0]["content"];
    assert_eq!(
        content,
        &json!([{"type": "text", "text":
            "[panto: an image of 2008 bytes was left out: more than max_message_bytes (1024)]"}])
    );
}

#[tokio::test]
async fn a_host_tool_answers_with_parts() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_tool_calls(&[("call_1", "shot", "{}")])),
        exchange(script::anthropic_text(&["ok"])),
    ]))
    .unwrap();
    let cfg = config(ProviderKind::Anthropic, &server)
        .with_prompt_caching(false)
        .with_host_tool(panto::ToolSpec {
            name: "shot".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            needs_approval: false,
            external: false,
        });
    let agent = Agent::new(cfg).unwrap();
    let control = TurnControl::default();
    struct Answer(panto::HostToolResults);
    impl panto::Receiver for Answer {
        fn on_event(&mut self, ev: Event) -> panto::Flow {
            if let Event::ToolCallStart {
                call_id,
                host: true,
                ..
            } = &ev
            {
                self.0
                    .submit_parts(
                        call_id,
                        vec![
                            Block::Image(Media::url("https://example.com/s.png")),
                            Block::text("a screenshot"),
                        ],
                        false,
                    )
                    .unwrap();
            }
            panto::Flow::Continue
        }
    }
    let mut answer = Answer(control.host.clone());
    tokio::time::timeout(
        HANG_GUARD,
        agent.run("shoot", &mut answer, &control, TurnOptions::default()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        server.requests()[1].body["messages"][2]["content"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}},
            {"type": "text", "text": "a screenshot"},
        ])
    );
}

fn body_of(kind: ProviderKind, messages: &[panto::Message]) -> Value {
    let params = panto::provider::RequestParams {
        model: "m",
        system: None,
        max_tokens: None,
        temperature: None,
        tools: &[],
        messages,
    };
    panto::provider::request_body(kind, &params)
}

#[test]
fn the_responses_api_and_gemini_get_their_own_forms() {
    let user = panto::Message {
        role: panto::Role::User,
        content: rich_input().into_parts(),
    };
    let body = body_of(ProviderKind::OpenAiResponses, std::slice::from_ref(&user));
    assert_eq!(
        body["input"][0]["content"],
        json!([
            {"type": "input_text", "text": "Compare these."},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{}", b64(&png()))},
            {"type": "input_file", "filename": "report.pdf",
             "file_data": format!("data:application/pdf;base64,{}", b64(&pdf()))},
        ])
    );
    let body = body_of(ProviderKind::Gemini, &[user]);
    assert_eq!(
        body["contents"][0]["parts"],
        json!([
            {"text": "Compare these."},
            {"fileData": {"fileUri": "https://example.com/cat.jpg"}},
            {"inlineData": {"mimeType": "image/png", "data": b64(&png())}},
            {"inlineData": {"mimeType": "application/pdf", "data": b64(&pdf())}},
        ])
    );
}
